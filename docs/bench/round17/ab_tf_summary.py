"""Summarise docs/bench/round17/ab_tf: tf_multiworker runs named tf_<bytes>_<pass>.json.

Per backend and measure: the value under each PYTFCOMM_SHM_BYREF_BYTES in every pass and the
per-pass ratio old/new for times, new/old for rates (> 1: the new setting did better).
"""

import glob
import json
import statistics
import sys
from collections import defaultdict

OLD, NEW = "4194304", "2097152"
TIMES = ("reduce-16MiB", "reduce-16MiB-graph", "reduce-16MiB-numpy", "resnet50-grads")
RATES = ("train", "keras-fit", "keras-fit-steady")


def main(folder: str) -> None:
    vals = defaultdict(dict)  # (backend, key, setting) -> {pass: value}
    for path in sorted(glob.glob(f"{folder}/tf_*.json")):
        _, setting, pas = path.rsplit("/", 1)[-1][:-5].split("_")
        for backend, row in json.load(open(path))["results"].items():
            if backend.startswith("limit"):
                continue
            for k, v in row.items():
                if isinstance(v, (int, float)) and k in TIMES + RATES:
                    vals[(backend, k, setting)][int(pas)] = v
    for backend, k in sorted({(b, k) for b, k, _ in vals}):
        old, new = vals[(backend, k, OLD)], vals[(backend, k, NEW)]
        passes = sorted(set(old) & set(new))
        if not passes:
            continue
        q = [(old[p] / new[p]) if k in TIMES else (new[p] / old[p]) for p in passes]
        fmt = (lambda v: f"{v * 1e3:.2f}") if k in TIMES else (lambda v: f"{v:,.0f}")
        unit = "ms" if k in TIMES else "examples/s"
        print(
            f"{backend} {k} ({unit}): old {[fmt(old[p]) for p in passes]} new "
            f"{[fmt(new[p]) for p in passes]}; better-by min/median/max "
            f"{min(q):.2f}/{statistics.median(q):.2f}/{max(q):.2f}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
