"""Round18: summary of ab_bench.sh's outputs (ab_bench/ and ab_bench_more/): per pass, the
strategy's and the Horovod-style path's 16 MiB per-call reduce (ms) under the old sequence
and the new, and Horovod-style / strategy time; medians over all passes."""

import re
import statistics
import sys
from pathlib import Path

here = Path(__file__).parent
dirs = sys.argv[1:] or ["ab_bench", "ab_bench_more"]
got: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
for d in dirs:
    for f in sorted((here / d).glob("*.txt")):
        which = f.stem.split("-")[0]
        rows = dict(re.findall(r"^\| (pytfcomm-\w+) \| ([\d.]+)", f.read_text(), re.M))
        got[which].append((float(rows["pytfcomm-mwms"]), float(rows["pytfcomm-horovod"])))
for which, runs in got.items():
    ratios = [h / m for m, h in runs]
    print(
        f"{which}: {len(runs)} passes; strategy {min(m for m, _ in runs):.2f}-"
        f"{max(m for m, _ in runs):.2f} ms (median {statistics.median(m for m, _ in runs):.2f}); "
        f"Horovod-style median {statistics.median(h for _, h in runs):.2f} ms; "
        f"Horovod-style / strategy {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(median {statistics.median(ratios):.2f})"
    )
