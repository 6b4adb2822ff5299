"""``pytfcomm-run --restarts N``: run the whole job again when a rank fails.

Modelled on torchrun's ``--max-restarts``. When a rank exits with a non-zero code or is
killed by a signal, the job is stopped as without restarts (every other rank gets
SIGTERM, then SIGKILL after ``--kill-timeout``, and every rank is reaped); then every rank
is started again from a new plan, up to N times:

* new free ports when the launcher picks them (local jobs without ``--port``) and a new
  job secret unless the user gave one, so no rank of the new job can reach or be reached
  by anything left of the old one;
* ``PYTFCOMM_RESTART_COUNT`` one higher (0 on the first run), ``PYTFCOMM_MAX_RESTARTS``
  = N, so a program can tell a restart from a first start.

Nothing else restarts: a signal to the launcher (also one that comes while a failed job
is being stopped), ``--timeout`` (one deadline for all the runs together), a program
that cannot be started, bad arguments. N bounds the number of runs, so a job that fails
at once ends after N + 1 quick runs instead of spinning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .hosts import UsageError
from .output import OutputRelay
from .procs import Job, Membership, RankSpec, catch_signals, restore_signals

__all__ = ["run_with_restarts"]


def run_with_restarts(
    first: Sequence[RankSpec],
    make_specs: Callable[[int], Sequence[RankSpec]],
    make_relay: Callable[[int], OutputRelay],
    *,
    restarts: int,
    kill_timeout: float,
    timeout: float | None,
    say: Callable[[str], None],
    membership: Callable[[int], Membership | None] | None = None,
) -> int:
    """Run ``first``; after a rank failure, ``make_specs(n)`` for restart n (1..restarts).

    ``make_relay(n)`` gives run n's output relay; ``membership(n)`` run n's elastic
    membership (``--elastic``: a lost rank is restarted only when the job cannot go on
    without it). Returns the launcher's exit code: 0 once
    a run succeeds, else the code of the last run (its first failing rank's code).
    """
    signals: list[int] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    old = catch_signals(signals)  # also between runs: a Ctrl-C there must not be lost
    try:
        specs, attempt = first, 0
        while True:
            job = Job(make_relay(attempt), kill_timeout=kill_timeout, timeout=timeout,
                      deadline=deadline, signals=signals, say=say,
                      membership=membership(attempt) if membership else None)  # fmt: skip
            code = job.run(specs)
            failed = job.failed
            if failed is None or signals or restarts == 0:
                return code
            if attempt >= restarts:
                say(f"{failed}; no restart left ({restarts} done): exit code {code}")
                return code
            if deadline is not None and time.monotonic() >= deadline:
                say(f"{failed}; --timeout {timeout:g} s has passed: not restarting")
                return code
            attempt += 1
            say(f"{failed}; restarting the job ({attempt} of {restarts})")
            try:
                specs = make_specs(attempt)
            except UsageError as exc:
                say(f"error: cannot restart the job: {exc}")
                return code
    finally:
        restore_signals(old)
