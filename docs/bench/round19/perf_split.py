"""Round19: what rank 0's core does during the reduce-scatter phase of the per-call reduce
and of the chain's all-reduces, from its timeline and a `perf record -k mono -e cpu-clock`
of the same run (copy_profile.sh). The TF all-reduces come in the order round18's
sequence.py issues them with SEQ=reduce,graph: one check call, then per iteration the
per-call reduce and the chain's 8 (the rule of round18's sequence_timeline.py). Prints, per
group, the phases' median length and the mean ms per phase of CPU samples by kind.

    python perf_split.py TIMELINE.json PERF.data
"""

import bisect
import statistics
import subprocess
import sys
from collections import Counter

from pytfcomm.timeline import load_events

BYTES = 16 << 20
WARM = 3  # sequence.py's untimed iterations
KINDS = (  # first match wins: (kind, where the symbol is, words in the symbol)
    ("kernel copy", "kernel", ("copy_to_iter", "copy_page_to_iter")),
    ("page pinning", "kernel", ("get_user_pages", "unpin_user", "pin_user", "follow_page")),
    ("other kernel", "kernel", ()),
    ("reduction", "libpytfcomm", ("reduce_avx2", "reduce_generic")),
    ("other pytfcomm", "libpytfcomm", ()),
    ("python", "libpython", ()),
    ("tensorflow", "tensorflow", ()),
)


def kind(sym: str, dso: str) -> str:
    for name, where, words in KINDS:
        if where in dso and (not words or any(w in sym for w in words)):
            return name
    return "other"


def samples(perf_data: str) -> tuple[list[float], list[str]]:
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "time,ip,sym,dso"],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        head, _, rest = line.strip().partition(":")
        try:
            t = float(head)
        except ValueError:
            continue
        parts = rest.split(None, 1)  # ip, then "sym (dso)"
        sym, _, dso = (parts[1] if len(parts) > 1 else "").rpartition(" (")
        rows.append((t * 1e6, kind(sym, dso)))
    rows.sort()
    return [r[0] for r in rows], [r[1] for r in rows]


def main() -> None:
    ev = load_events(sys.argv[1])
    ts, kinds = samples(sys.argv[2])
    period = statistics.median(b - a for a, b in zip(ts, ts[1:]))  # us per sample
    colls = [e for e in ev if e.get("cat") == "collective" and e["args"].get("bytes") == BYTES]
    tf_ops = [e for e in colls if "PytfcommAllReduce" in e["args"].get("label", "")]
    iters = (len(tf_ops) - 1) // 9
    groups = {
        "per-call reduce": {tf_ops[1 + 9 * k]["args"]["seq"] for k in range(WARM, iters)},
        "chain": {e["args"]["seq"] for k in range(WARM, iters) for e in tf_ops[2 + 9 * k : 10 + 9 * k]},
    }
    for g, seqs in groups.items():
        phases = [
            e for e in ev
            if e.get("cat") == "phase" and e["name"] == "reduce_scatter" and e["args"].get("seq") in seqs
        ]
        by = Counter()
        for e in phases:
            i, j = bisect.bisect_left(ts, e["ts"]), bisect.bisect_right(ts, e["ts"] + e["dur"])
            by.update(kinds[i:j])
        n = max(len(phases), 1)
        cells = ", ".join(f"{k} {c * period / n / 1e3:.2f}" for k, c in by.most_common())
        med = statistics.median(e["dur"] for e in phases) / 1e3 if phases else float("nan")
        print(f"  {g}: {len(phases)} reduce-scatter phases, median {med:.2f} ms; ms per phase: {cells}")


main()
