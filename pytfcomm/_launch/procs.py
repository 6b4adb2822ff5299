"""Start the ranks, watch them, and stop them all when one fails or a signal comes.

* Every rank runs in its own session and process group, so a signal reaches the rank and
  whatever it started, and a terminal's Ctrl-C reaches only the launcher, which forwards it.
* Every rank gets ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: if the launcher dies, even by
  SIGKILL, the kernel kills its direct children (local ranks, and the ssh clients, whose
  end makes the remote watchdog kill the remote rank).
* Exits are noticed with ``waitid(WNOWAIT)``: an exited rank stays a zombie until the
  end, so its process-group id cannot be reused and ``killpg`` never hits a stranger.
* One :class:`Job` is one attempt: ``restart.py`` runs a new one (new ports, new secret)
  when :attr:`Job.failed` says a rank failed and restarts are left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .output import OutputRelay
from .remote import NO_SECRET_STATUS

__all__ = [
    "Failure",
    "Job",
    "Membership",
    "RankSpec",
    "catch_signals",
    "exit_code",
    "restore_signals",
]

_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TICK = 0.05
_DRAIN_S = 2.0


def _load_libc() -> ctypes.CDLL | None:
    """The C library when it has ``prctl`` (only Linux's does), else None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018 - probe: only Linux has it
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()


def _child_setup(parent: int, cpus: frozenset[int] | None) -> Callable[[], None]:
    def preexec() -> None:
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os._exit(1)
        if cpus is not None:  # --bind-to core (binding.py); inherited by every thread
            os.sched_setaffinity(0, cpus)

    return preexec


def _killpg(pgid: int, sig: int) -> None:
    """Signal a rank's process group; one that is gone already is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def catch_signals(into: list[int]) -> dict[int, Any]:
    """Append every SIGINT, SIGTERM and SIGHUP to ``into`` from now on; the old handlers."""

    def record(signum: int, _frame: object) -> None:
        into.append(signum)

    return {s: signal.signal(s, record) for s in _FORWARDED}


def restore_signals(old: dict[int, Any]) -> None:
    """Put back the handlers :func:`catch_signals` replaced."""
    for s, handler in old.items():
        signal.signal(s, handler)


def exit_code(status: int) -> int:
    """A Popen-style status (negative: killed by that signal) as a shell exit code."""
    return 128 - status if status < 0 else status


def describe(status: int) -> str:
    """'exited with code 3' or 'was killed by signal SIGKILL (exit code 137)'."""
    if status >= 0:
        return f"exited with code {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"was killed by {name} (exit code {exit_code(status)})"


class Membership(Protocol):
    """What a :class:`Job` asks of ``pytfcomm-run --elastic`` (``membership.py``)."""

    def exited(self, worker: int, status: int) -> bool: ...

    def is_member(self, worker: int) -> bool: ...

    def joiners(self) -> Sequence[RankSpec]: ...


@dataclass
class RankSpec:
    """How to start one rank: argv and full environment; ``stdin_line`` for ssh ranks;
    ``cpus``: the CPUs a local rank is bound to (``--bind-to core``), None to inherit ours."""

    rank: int
    host: str
    argv: Sequence[str]
    env: Mapping[str, str]
    stdin_line: bytes | None = None
    cpus: frozenset[int] | None = None


@dataclass(frozen=True)
class Failure:
    """The first rank that failed in a job: its rank and Popen-style status."""

    rank: int
    status: int

    def __str__(self) -> str:
        if self.status >= 0:
            return f"rank {self.rank} exited with code {self.status}"
        try:
            name = signal.Signals(-self.status).name
        except ValueError:
            name = f"signal {-self.status}"
        return f"rank {self.rank} died ({name})"


@dataclass
class _Rank:
    spec: RankSpec
    popen: subprocess.Popen
    status: int | None = None
    killed: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def remote(self) -> bool:
        return self.spec.stdin_line is not None


def _peek_status(popen: subprocess.Popen) -> int | None:
    """The exit status of a child without reaping it; None while it runs."""
    try:
        res = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (never by us): trust Popen
        return popen.poll()
    if res is None or res.si_pid == 0:
        return None
    return res.si_status if res.si_code == os.CLD_EXITED else -res.si_status


class Job:
    """A set of ranks supervised together; :meth:`run` returns the launcher's exit code.

    ``deadline`` (``time.monotonic()``) ends the job as ``--timeout`` does (default: now +
    ``timeout``). ``signals`` collects the signals the launcher gets; pass one list to
    several jobs run one after the other (restarts) so that none is lost between them.
    After :meth:`run`, :attr:`failed` tells whether the job ended because a rank failed.
    With ``membership`` (``--elastic``), a rank that fails while enough others run is
    left behind instead: the others go on, and ranks dropped from the membership that
    still run are stopped once every member has exited.
    """

    def __init__(
        self,
        relay: OutputRelay,
        *,
        kill_timeout: float,
        timeout: float | None,
        say: Callable[[str], None],
        deadline: float | None = None,
        signals: list[int] | None = None,
        membership: Membership | None = None,
    ) -> None:
        self._relay = relay
        self._membership = membership
        self._kill_timeout = kill_timeout
        self._timeout = timeout
        self._deadline = deadline
        self._say = say
        self._ranks: list[_Rank] = []
        self._signals: list[int] = [] if signals is None else signals
        self._stop_deadline: float | None = None
        self._hard_killed = False
        #: The first rank failure, when that (not a signal, --timeout or a rank that
        #: could not be started) is what ended the job; None otherwise.
        self.failed: Failure | None = None

    # ------------------------------------------------------------------ starting
    def _spawn(self, spec: RankSpec) -> _Rank:
        popen = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            stdin=subprocess.PIPE if spec.stdin_line is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_child_setup(os.getpid(), spec.cpus),
        )
        assert popen.stdout is not None and popen.stderr is not None
        self._relay.add(spec.rank, os.dup(popen.stdout.fileno()), is_stderr=False)
        self._relay.add(spec.rank, os.dup(popen.stderr.fileno()), is_stderr=True)
        popen.stdout.close()
        popen.stderr.close()
        if spec.stdin_line is not None:
            assert popen.stdin is not None
            with contextlib.suppress(OSError):  # ssh already gone: its status tells why
                popen.stdin.write(spec.stdin_line)
                popen.stdin.flush()
        return _Rank(spec, popen)

    # ------------------------------------------------------------------ stopping
    def _signal_rank(self, r: _Rank, sig: int) -> None:
        if r.status is not None and sig != signal.SIGKILL:
            return
        if r.remote and sig != signal.SIGKILL:
            # Closing ssh's stdin makes the remote watchdog TERM (then KILL) the rank;
            # a stopped ssh client would never notice, so wake it first.
            _killpg(r.popen.pid, signal.SIGCONT)
            if r.popen.stdin is not None and not r.popen.stdin.closed:
                with contextlib.suppress(OSError):
                    r.popen.stdin.close()
            return
        _killpg(r.popen.pid, sig)
        if sig != signal.SIGKILL:
            # A stopped process (SIGSTOP, a debugger, Ctrl-Z in its own terminal) keeps
            # sig pending until continued: without SIGCONT, stopping it would cost the
            # whole --kill-timeout before SIGKILL.
            _killpg(r.popen.pid, signal.SIGCONT)

    def _stop_all(self, sig: int) -> None:
        for r in self._ranks:
            if r.status is None:
                r.killed = True
            self._signal_rank(r, sig)
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic() + self._kill_timeout

    def _kill_all(self) -> None:
        self._hard_killed = True
        for r in self._ranks:
            if r.status is None:
                r.killed = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.popen.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ running
    def run(self, specs: Sequence[RankSpec]) -> int:
        """Start every rank, relay output, and return the exit code (docs/launching.md)."""
        old = catch_signals(self._signals)
        try:
            return self._run(specs)
        finally:
            self._cleanup()
            restore_signals(old)

    def _run(self, specs: Sequence[RankSpec]) -> int:
        if self._signals:  # a signal came before anything started: start nothing
            return 128 + self._signals[0]
        for spec in specs:
            if self._signals:
                break
            try:
                self._ranks.append(self._spawn(spec))
            except OSError as exc:
                self._say(f"cannot start rank {spec.rank} ({spec.argv[0]!r}): {exc}")
                self._stop_all(signal.SIGTERM)
                self._wait_stopped()
                return 126 if isinstance(exc, PermissionError) else 127
        deadline = self._deadline
        if deadline is None and self._timeout is not None:
            deadline = time.monotonic() + self._timeout
        result: int | None = None
        handled_signals = 0
        while True:
            self._relay.pump(_TICK)
            now = time.monotonic()
            if len(self._signals) > handled_signals:
                sig = self._signals[handled_signals]
                handled_signals = len(self._signals)
                if result is None:
                    result = 128 + sig
                    self._say(f"received {signal.Signals(sig).name}: forwarding it to all ranks")
                    self._stop_all(sig)
                else:
                    self._say(
                        f"received {signal.Signals(sig).name} while stopping the ranks: "
                        "killing them"
                    )
                    self._kill_all()
            for r in self._ranks:
                if r.status is not None:
                    continue
                r.status = _peek_status(r.popen)
                if r.status is None or result is not None:
                    continue
                if self._left_behind(r):
                    continue
                if r.status != 0:
                    result = exit_code(r.status)
                    self.failed = Failure(r.spec.rank, r.status)
                    alive = sum(1 for x in self._ranks if x.status is None)
                    self._say(
                        f"rank {r.spec.rank} (host {r.spec.host}, pid {r.popen.pid}) "
                        f"{describe(r.status)}{self._hint(r)}; stopping the other "
                        f"{alive} rank(s)"
                    )
                    self._stop_all(signal.SIGTERM)
            if result is None and not self._signals:
                self._start_joiners()
            if all(r.status is not None for r in self._ranks):
                break
            if result is None:
                self._stop_dropped()
            if result is None and deadline is not None and now >= deadline:
                result = 124
                self._say(f"the job ran past --timeout {self._timeout:g} s: stopping all ranks")
                self._stop_all(signal.SIGTERM)
            if self._stop_deadline is not None and now >= self._stop_deadline:
                if not self._hard_killed:
                    self._say(f"ranks still running after {self._kill_timeout:g} s: SIGKILL")
                    self._kill_all()
        return 0 if result is None else result

    def _left_behind(self, r: _Rank) -> bool:
        """With ``--elastic``: tell the membership that ``r`` exited; True when the job
        goes on without it (nothing more to do here)."""
        if self._membership is None:
            return False
        assert r.status is not None
        if not self._membership.exited(r.spec.rank, r.status):
            return False
        if r.status != 0 and not r.killed:
            self._say(
                f"rank {r.spec.rank} (host {r.spec.host}, pid {r.popen.pid}) "
                f"{describe(r.status)}{self._hint(r)}; the job goes on without it (--elastic)"
            )
        return True

    def _start_joiners(self) -> None:
        """With ``--elastic --host-discovery-script``: start the joiners the membership
        wants (they join at the ranks' next commit point)."""
        if self._membership is None:
            return
        for spec in self._membership.joiners():
            try:
                self._ranks.append(self._spawn(spec))
            except OSError as exc:
                self._say(f"cannot start joiner {spec.rank} ({spec.argv[0]!r}): {exc}")
                self._membership.exited(spec.rank, 127)

    def _stop_dropped(self) -> None:
        """With ``--elastic``: once no member runs, stop the ranks dropped from the job."""
        if self._membership is None or self._stop_deadline is not None:
            return
        running = [r for r in self._ranks if r.status is None]
        if not running or any(self._membership.is_member(r.spec.rank) for r in running):
            return
        ranks = ", ".join(str(r.spec.rank) for r in running)
        self._say(f"every member has exited; stopping rank(s) {ranks}, dropped from the job")
        self._stop_all(signal.SIGTERM)

    def _hint(self, r: _Rank) -> str:
        if r.remote and r.status == 255:
            return " (ssh could not run it: check that the host is reachable without a password)"
        if r.remote and r.status == NO_SECRET_STATUS:
            return " (the remote wrapper got no job secret on stdin)"
        if r.status == 127:
            return " (command not found?)"
        return ""

    def _wait_stopped(self) -> None:
        """Wait (bounded) until every started rank exited, escalating to SIGKILL."""
        while any(r.status is None for r in self._ranks):
            self._relay.pump(_TICK)
            for r in self._ranks:
                if r.status is None:
                    r.status = _peek_status(r.popen)
            if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
                if self._hard_killed:
                    break
                self._kill_all()
                self._stop_deadline = time.monotonic() + 5.0

    def _cleanup(self) -> None:
        """Relay the last output, kill stragglers left in the ranks' groups, reap."""
        if any(r.status is None for r in self._ranks):  # an exception in _run
            self._kill_all()
        end = time.monotonic() + _DRAIN_S
        while self._relay.open_streams and time.monotonic() < end:
            self._relay.pump(_TICK)
        for r in self._ranks:  # the leaders are unreaped zombies: the pgids are still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.popen.pid, signal.SIGKILL)
        end = time.monotonic() + 0.5
        while self._relay.open_streams and time.monotonic() < end:
            self._relay.pump(_TICK)
        self._relay.close()
        for r in self._ranks:
            if r.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    r.popen.stdin.close()
            try:
                r.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                print(f"pytfcomm-run: pid {r.popen.pid} did not exit", file=sys.stderr)
