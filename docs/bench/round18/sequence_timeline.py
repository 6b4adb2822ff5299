"""Round18: where the slow per-call reduce after a chain spends its time, from the
timelines sequence_timeline.sh writes. For each run and rank: the median span inside
pytfcomm (call to return, us) of the per-call reduce, of the chain's all-reduces and of the
NumPy all-reduce, and the per-call reduce's and the chain's reduce-scatter and all-gather
phases. The TF all-reduces come in the order sequence.py issues them: one check call, then
per iteration the per-call reduce and the chain's 8.

    python sequence_timeline.py DIR
"""

import statistics
import sys
from pathlib import Path

from pytfcomm.timeline import load_events

BYTES = 16 << 20
WARM = 3  # sequence.py's untimed iterations


def summary(path: Path) -> str:
    ev = load_events(path)
    colls = [e for e in ev if e.get("cat") == "collective" and e["args"].get("bytes") == BYTES]
    tf_ops = [e for e in colls if "PytfcommAllReduce" in e["args"].get("label", "")]
    iters = (len(tf_ops) - 1) // 9
    reduce = [tf_ops[1 + 9 * k] for k in range(WARM, iters)]
    chain = [e for k in range(WARM, iters) for e in tf_ops[2 + 9 * k : 10 + 9 * k]]
    numpy_ = [e for e in colls if e not in tf_ops][WARM:]
    seqs = {
        "reduce": {e["args"]["seq"] for e in reduce},
        "chain": {e["args"]["seq"] for e in chain},
    }
    phases: dict[str, dict[str, list[float]]] = {g: {} for g in seqs}
    for e in ev:
        if e.get("cat") == "phase" and e["name"] in ("reduce_scatter", "all_gather"):
            for g, s in seqs.items():
                if e["args"].get("seq") in s:
                    phases[g].setdefault(e["name"], []).append(e["dur"])

    def med(xs: list) -> str:
        return f"{statistics.median(xs):.0f}" if xs else "-"

    cells = [
        f"{g} {med([e['dur'] for e in es])}"
        for g, es in (("reduce", reduce), ("chain", chain), ("numpy", numpy_))
    ]
    for g in seqs:
        cells.append(
            f"{g}: reduce_scatter {med(phases[g].get('reduce_scatter', []))}, "
            f"all_gather {med(phases[g].get('all_gather', []))}"
        )
    return "; ".join(cells)


for f in sorted(Path(sys.argv[1]).glob("*.json")):
    print(f"{f.stem}: {summary(f)}")
