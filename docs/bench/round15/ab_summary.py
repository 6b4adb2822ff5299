"""Summarise an A/B folder of benchmarks.allreduce runs named np<N>_<config>_<pass>.json.

Prints, per rank count, size and config: pytfcomm-tcp's time in each pass, MPI's time over
ours in the same run, the median time and how many passes had MPI no faster.
"""

import glob
import json
import statistics
import sys
from collections import defaultdict


def main(folder: str) -> None:
    runs = defaultdict(list)
    for path in sorted(glob.glob(f"{folder}/np*_*.json")):
        np_, cfg, _ = path.rsplit("/", 1)[-1][:-5].split("_")
        backends = json.load(open(path))["backends"]
        mpi = {r["bytes"]: r["time_us"] for r in backends["mpi-tcp"]["rows"]}
        for r in backends["pytfcomm-tcp"]["rows"]:
            runs[(int(np_[2:]), r["bytes"], cfg)].append(
                (r["time_us"], mpi[r["bytes"]] / r["time_us"])
            )
    for (n, size, cfg), v in sorted(runs.items()):
        times = [round(t) for t, _ in v]
        ratios = [round(q, 2) for _, q in v]
        ahead = sum(q >= 1 for _, q in v)
        print(
            f"N={n} {size / 2**20:g} MiB {cfg:>4}: median {statistics.median(times):.0f} us, "
            f"MPI/ours {ratios}, ours >= MPI {ahead}/{len(v)}; times {times}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
