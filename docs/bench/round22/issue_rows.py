"""Issue 19's rows from round22's sitting outputs (docs/bench/round22/issue/): the per-round
ratios of the benchmark JSONs and the limit lines, printed as the README quotes them.
Run from the repository root: python docs/bench/round22/issue_rows.py"""

from __future__ import annotations

import json
import re
from pathlib import Path

D = Path(__file__).parent / "issue"


def per_round(name: str, peer: str, ref: str, size: int) -> list[float]:
    b = json.loads((D / name).read_text())["backends"]
    row = {r["bytes"]: r for r in b[ref]["rows"]}[size]
    prow = {r["bytes"]: r for r in b[peer]["rows"]}[size]
    return [p / q for p, q in zip(prow["round_us"], row["round_us"], strict=True)]


def fmt(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


for n, size in ((4, 1 << 20), (4, 2 << 20), (4, 4 << 20), (2, 4 << 20)):
    ratios = per_round(f"tcp{n}.json", "mpi-tcp", "pytfcomm-tcp", size)
    print(f"N={n} TCP {size >> 20} MiB mpi-tcp/pytfcomm-tcp:", fmt(ratios))
fracs, times, mpi = [], [], []
for i in range(1, 6):
    d = json.loads((D / f"shm2_{i}.json").read_text())
    row = {r["bytes"]: r for r in d["backends"]["pytfcomm"]["rows"]}[64 << 20]
    mrow = {r["bytes"]: r for r in d["backends"]["mpi-shm"]["rows"]}[64 << 20]
    memcpy = d["meta"]["limits"]["memcpy_gbs"][str(64 << 20)]
    fracs.append(row["busbw_gbs"] / memcpy)
    times.append(row["time_us"] / 1000)
    mpi.append(mrow["time_us"] / row["time_us"])
print("64 MiB N=2 shm busbw/memcpy:", fmt(fracs))
print("  pytfcomm ms", fmt(times), "| mpi-shm/pytfcomm", fmt(mpi))
local = []
for i in range(1, 6):
    t = (D / f"tf_local_{i}.txt").read_text()
    m = re.search(r"\| tf\.ReductionToOneDevice \| [\d.]+ \| ([\d.]+) \|", t)
    ring = re.search(r"\| pytfcomm\.RingAllReduce \| ([\d.]+) \|", t)
    local.append(f"{float(m.group(1)):.2f} (ring {ring.group(1)} ms)")
print("tf_local ReductionToOneDevice/RingAllReduce:", ", ".join(local))
