"""The table of overhead.py's records: where each way's time per call goes.

    python overhead_report.py DIR [DIR ...]

All times are medians over the iterations after the 3 warm-ups, in
microseconds, from rank 0's start ``t0`` unless said otherwise:

- ``call r0`` / ``call r1``: each rank's whole call (t1 - t0), as benchmarks/nccl.py;
- ``t0 skew``: rank 1's start minus rank 0's (they leave the barrier apart);
- ``launch r0`` / ``launch r1``: when each rank's all-reduce was enqueued,
  from that rank's own start;
- ``last launch``: the later rank's enqueue, from the earlier rank's start;
- ``done after``: rank 0's return after the later enqueue (the GPU's part);
- pytfcomm only (needs --timeline): ``py->core`` (Python and DLPack before the
  core's collective begins), ``negotiate`` (the host verification round),
  ``nccl_launch`` (enqueueing on NCCL) and ``gpu_wait``, rank 0.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections import defaultdict


def load(d: str):
    ranks = []
    for r in (0, 1):
        with open(os.path.join(d, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    tls = []
    for r in (0, 1):
        p = os.path.join(d, f"tl.rank{r}.json")
        if not os.path.exists(p):
            tls.append(None)
            continue
        with open(p) as f:
            ev = json.load(f)
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        tls.append([e for e in ev if e.get("ph") == "X"])
    return ranks, tls


def core_spans(events, t0_ns: int, t1_ns: int) -> dict | None:
    """The core's collective inside [t0, t1] and its phases, in ns."""
    if events is None:
        return None
    lo, hi = t0_ns / 1e3, t1_ns / 1e3
    coll = [e for e in events if e["cat"] == "collective" and lo <= e["ts"] <= hi
            and e["name"] == "allreduce"]  # fmt: skip
    if not coll:
        return None
    c = max(coll, key=lambda e: e["dur"])
    seq = c.get("args", {}).get("seq")
    out = {"core_start": c["ts"] * 1e3, "core_end": (c["ts"] + c["dur"]) * 1e3}
    for e in events:
        if e["cat"] == "phase" and e.get("args", {}).get("seq") == seq and lo <= e["ts"] <= hi:
            out[e["name"] + "_start"] = e["ts"] * 1e3
            out[e["name"] + "_dur"] = e["dur"] * 1e3
    return out


def table(d: str) -> str:
    ranks, tls = load(d)
    rows = {r: {(x["way"], x["bytes"], x["iter"]): x for x in ranks[r]["rows"]} for r in (0, 1)}
    cols = defaultdict(lambda: defaultdict(list))
    for key, a in rows[0].items():
        way, nbytes, it = key
        b = rows[1].get(key)
        if it < 3 or b is None:
            continue
        c = cols[(way, nbytes)]
        c["call r0"].append(a["t1"] - a["t0"])
        c["call r1"].append(b["t1"] - b["t0"])
        c["t0 skew"].append(b["t0"] - a["t0"])
        la, lb = a["launched"], b["launched"]
        if way.startswith("pytfcomm") or way == "cupy":
            sa = core_spans(tls[0], a["t0"], a["t1"])
            sb = core_spans(tls[1], b["t0"], b["t1"])
            la = sa.get("nccl_launch_start", 0) + sa.get("nccl_launch_dur", 0) if sa else 0
            lb = sb.get("nccl_launch_start", 0) + sb.get("nccl_launch_dur", 0) if sb else 0
            if sa:
                c["py->core"].append(sa["core_start"] - a["t0"])
                for ph in ("negotiate", "nccl_launch", "gpu_wait"):
                    if ph + "_dur" in sa:
                        c[ph].append(sa[ph + "_dur"])
                c["core->ret"].append(a["t1"] - sa["core_end"])
        if la and lb:
            c["launch r0"].append(la - a["t0"])
            c["launch r1"].append(lb - b["t0"])
            c["last launch"].append(max(la, lb) - min(a["t0"], b["t0"]))
            c["done after"].append(a["t1"] - max(la, lb))
    names = ["call r0", "call r1", "t0 skew", "launch r0", "launch r1", "last launch",
             "done after", "py->core", "negotiate", "nccl_launch", "gpu_wait", "core->ret"]  # fmt: skip
    verify = ranks[0].get("verify")
    lines = [f"{d} (PYTFCOMM_GPU_VERIFY={verify}), us, median",
             "| size | way | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]  # fmt: skip
    for (way, nbytes), c in sorted(cols.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [f"{statistics.median(c[n]) / 1e3:.0f}" if c.get(n) else "-" for n in names]
        lines.append(f"| {nbytes >> 10} KiB | {way} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for d in sys.argv[1:]:
        print(table(d))
        print()
