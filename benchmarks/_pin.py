"""``python -m benchmarks._pin CMD ARGS...``: bind this rank to its CPUs, then exec CMD.

Every backend's workers start through it when a benchmark runs with ``--bind-to core``, so
each library's ranks get the same CPUs as ``pytfcomm-run --bind-to core`` gives pytfcomm's
(``pytfcomm._launch.binding``), whatever launched them: ``BENCH_CPUS`` lists each rank's
CPUs (``0;1;0;1``, one ``taskset -c`` list per rank), and the rank comes from
``OMPI_COMM_WORLD_RANK`` (under ``mpirun``) or ``BENCH_RANK`` (spawned workers).
The binding is set before ``exec``, so every thread the library starts inherits it.
"""

from __future__ import annotations

import os
import sys

# mpirun's own first: its ranks all inherit the one BENCH_RANK of the mpirun process.
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "BENCH_RANK")


def parse_cpu_list(text: str) -> set[int]:
    """``0-3,6`` -> {0, 1, 2, 3, 6}."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def rank_cpus(environ: dict[str, str]) -> set[int]:
    """This rank's CPUs from ``BENCH_CPUS`` and the first rank variable set."""
    lists = environ["BENCH_CPUS"].split(";")
    rank = next(int(environ[v]) for v in RANK_VARS if v in environ)
    return parse_cpu_list(lists[rank])


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m benchmarks._pin CMD [ARGS...]")
    os.sched_setaffinity(0, rank_cpus(dict(os.environ)))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
