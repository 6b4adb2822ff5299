"""A rank program for tests/reliability/test_elastic_grow.py (``--host-discovery-script``).

``elastic_grow_workers.py MODE OUTDIR TARGET MIN_STEPS EXTRA``. Every process, known by
its worker id ``i`` (PYTFCOMM_ELASTIC_ID: the rank it was started as, or a new id for a
joiner), runs steps of ``w -= 0.01 * sum(g) / size`` with
``g = (i + 1) * (step + 1) * arange(4)`` from each member. After each step it commits
``(step, w)`` and asks :func:`pytfcomm.elastic.hosts_updated`; when that says True it
re-forms (:func:`pytfcomm.elastic.reform`) and takes rank 0's commit. A joiner's
``pytfcomm.init()`` returns once it is admitted; it then takes rank 0's commit by the same
broadcasts. The job stops, alike on every rank, once it has TARGET ranks, at least
MIN_STEPS steps and EXTRA steps since its last re-forming (or at CAP steps).

Files in OUTDIR: ``starts<i>.jsonl`` (one line per process start), ``step5`` (rank 0 at
step 5, when the test may change the discovered slots), ``addr`` (the membership
service's address, for the security test), ``result<i>.json`` (pid, joiner or not, the
(step, rank, size) of every step, the epoch, the step it joined or re-formed at, the
wall time of the first step with TARGET ranks, ``times``: a joiner's start and admission,
a member's ``hosts_updated()`` True and next step done, ``w`` as hex floats).

MODE ``joiner-dies``: a joiner exits 3 before ``init()``. MODE ``race`` (a joiner
arrives during a commit): the joiner waits before ``init()``
for OUTDIR/let_join. Rank 0 records each of its polls of the launcher
(``polled<step>``: the answer). At the first commit after the joiner started, rank 1
waits until rank 0 asked (and got "no"), writes ``in_commit`` (the step) and lingers
in the commit until the joiner sent its request (``join_sent``) and one more second:
the joiner arrives while the ranks commit, after rank 0's question, so it is admitted
at the next commit point, on every rank.
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.time()  # a joiner's start, before numpy and pytfcomm are imported

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from elastic_workers import _layout, _wait_for  # noqa: E402  (this folder: sys.path[0])

import pytfcomm  # noqa: E402
import pytfcomm.elastic as pe  # noqa: E402

CAP = 2000
PACE = 0.02


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    target, min_steps, extra = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    me = int(os.environ["PYTFCOMM_ELASTIC_ID"])
    joiner = os.environ.get("PYTFCOMM_ELASTIC_JOINER") == "1"
    with open(out / f"starts{me}.jsonl", "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "joiner": joiner}) + "\n")
    if mode == "joiner-dies" and joiner:
        sys.exit(3)  # before its admission
    if mode == "race" and joiner:
        (out / "joiner_waiting").write_text(str(me))
        _wait_for(out / "let_join")
        (out / "join_sent").write_text(repr(time.time()))
    if mode == "race":
        real_poll = pe._poll
        polls: list[int] = []

        def recording_poll(*a: object, **k: object) -> bool:
            answer = real_poll(*a, **k)  # type: ignore[arg-type]
            (out / f"polled{polls[-1] if polls else -1}").write_text(str(answer))
            return answer

        pe._poll = recording_poll  # type: ignore[assignment]
    comm = pytfcomm.init()
    if me == 0:
        (out / "addr").write_text(os.environ["PYTFCOMM_ELASTIC_ADDR"])
    w = np.zeros(4, np.float64)
    step = 0
    if joiner:  # take rank 0's commit, as the members do right after reform()
        w = comm.broadcast(w, root=0)
        step = int(comm.broadcast(np.array([0], np.int64), root=0)[0])
    since = step  # the step of the last (re-)forming
    seen: list[list[int]] = []
    times: dict[str, float] = {"started": T0, "joined": time.time()} if joiner else {}
    full_at = None
    raced = None
    while step < CAP and not (comm.size >= target and step >= min_steps and step >= since + extra):
        g = (me + 1) * (step + 1) * np.arange(4, dtype=np.float64)
        total = comm.allreduce(g, op="sum")
        w = w - 0.01 * (total / comm.size)
        seen.append([step, comm.rank, comm.size])
        if comm.size >= target and full_at is None:
            full_at = time.time()
        if "interrupted" in times and "next_step" not in times:
            times["next_step"] = time.time()
        step += 1
        if step == 5 and comm.rank == 0:
            (out / "step5").write_text("")
        time.sleep(PACE)
        saved = (step, w.copy())  # the commit
        if mode == "race":
            if comm.rank == 0:
                polls.append(step)
            elif comm.rank == 1 and raced is None and (out / "joiner_waiting").exists():
                raced = step
                _wait_for(out / f"polled{step}")
                (out / "in_commit").write_text(str(step))
                _wait_for(out / "join_sent")
                time.sleep(1.0)  # the joiner's request reaches the launcher meanwhile
        if pe.hosts_updated():
            times.setdefault("interrupted", time.time())
            comm = pe.reform()
            w = comm.broadcast(saved[1].copy(), root=0)
            step = int(comm.broadcast(np.array([saved[0]], np.int64), root=0)[0])
            since = step
    result = {
        "pid": os.getpid(),
        "joiner": joiner,
        "seen": seen,
        "epoch": pe.epoch(),
        "layout": _layout(comm),
        "since": since,
        "full_at": full_at,
        "times": times,
        "raced": raced,
        "w": [float(x).hex() for x in w],
    }
    (out / f"result{me}.json").write_text(json.dumps(result))
    comm.close()


if __name__ == "__main__":
    main()
