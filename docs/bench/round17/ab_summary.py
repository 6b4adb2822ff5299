"""Summarise docs/bench/round17/ab_byref: runs of benchmarks.allreduce named np<N>_<bytes>_<pass>.json.

Per rank count and size: pytfcomm's time under each PYTFCOMM_SHM_BYREF_BYTES in every pass,
the median, and the per-pass ratio old/new (> 1: the new setting was faster in that pass).

A run whose control size (the smallest of its rank count, which neither setting changes)
took over twice its median over all runs is marked as having hit the VM's slow stretch
(README, Known limits). The ratios are given over every pass, then over the passes where
neither run hit one, and the passes where only one did are listed apart.
"""

import glob
import json
import statistics
import sys
from collections import defaultdict

OLD, NEW = "4194304", "2097152"


def main(folder: str) -> None:
    times = defaultdict(dict)  # (n, size, setting) -> {pass: us}
    for path in sorted(glob.glob(f"{folder}/np*_*.json")):
        np_, setting, pas = path.rsplit("/", 1)[-1][:-5].split("_")
        for r in json.load(open(path))["backends"]["pytfcomm"]["rows"]:
            times[(int(np_[2:]), r["bytes"], setting)][int(pas)] = r["time_us"]
    slow = set()  # (n, setting, pass)
    for n in sorted({n for n, _, _ in times}):
        control = min(s for m, s, _ in times if m == n)
        runs = {(st, p): t for st in (OLD, NEW) for p, t in times[(n, control, st)].items()}
        median = statistics.median(runs.values())
        slow |= {(n, st, p) for (st, p), t in runs.items() if t > 2 * median}
    for n, size in sorted({(n, s) for n, s, _ in times}):
        old, new = times[(n, size, OLD)], times[(n, size, NEW)]
        passes = sorted(set(old) & set(new))
        ratios = {p: old[p] / new[p] for p in passes}
        calm = [p for p in passes if (n, OLD, p) not in slow and (n, NEW, p) not in slow]

        def spread(ps: list) -> str:
            q = [ratios[p] for p in ps]
            if not q:
                return "none"
            return f"{min(q):.2f}/{statistics.median(q):.2f}/{max(q):.2f} ({len(q)})"

        print(
            f"N={n} {size / 2**20:g} MiB ({size / n / 2**20:g} MiB per rank): "
            f"median old {statistics.median(old.values()):.0f} us, new "
            f"{statistics.median(new.values()):.0f} us; old/new min/median/max every pass "
            f"{spread(passes)}, passes with no slow stretch {spread(calm)}; "
            f"new faster {sum(q > 1 for q in ratios.values())}/{len(ratios)}"
        )
        print(f"    old {[round(old[p]) for p in passes]}")
        print(f"    new {[round(new[p]) for p in passes]}")
        for st, name in ((OLD, "old"), (NEW, "new")):
            hit = [p for p in passes if (n, st, p) in slow]
            if hit:
                print(f"    slow stretch in the {name} run of pass(es) {hit}")


if __name__ == "__main__":
    main(sys.argv[1])
