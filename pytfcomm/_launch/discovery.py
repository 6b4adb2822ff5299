"""``pytfcomm-run --elastic --host-discovery-script PATH``: how many ranks the job wants.

Horovod's contract: PATH is an executable that prints the hosts the job may use, one a
line, ``host:slots`` or ``host`` (one slot). The launcher runs it every
:data:`PERIOD_S` seconds, each run bounded by :data:`SCRIPT_TIMEOUT_S` (then its whole
process group is killed). The job's target size is the slots of this machine's entries
(``localhost``, 127.x, this host's name or address), capped by ``--max-np``: elastic
jobs run on the launcher's machine only, so another host's entry is left out with a
warning. A run that fails (non-zero exit, timeout, a line that is no ``host[:slots]``)
changes nothing: the launcher warns once per distinct problem and keeps the last target.
A target below the running ranks stops nothing (ranks leave only when they are lost).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from .hosts import UsageError, _parse_entry
from .procs import _child_setup

__all__ = ["PERIOD_S", "SCRIPT_TIMEOUT_S", "HostDiscovery", "parse_output"]

PERIOD_S = 1.0  # between two runs of the script
SCRIPT_TIMEOUT_S = 10.0  # one run's longest time
_MAX_OUTPUT = 64 * 1024  # more than this is no host list
_ONE_MACHINE = "--elastic runs ranks on this machine only, so its slots are left out"


def parse_output(text: str) -> tuple[int, list[str]]:
    """This machine's slots in the script's output, and the other hosts' warnings.

    UsageError (naming the line) when a line is no ``host[:slots]``.
    """
    slots, others = 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        host = _parse_entry(line, f"line {n}")
        if host.local:
            slots += host.slots
        else:
            others.append(f"host {host.name!r} (line {n}) is not this machine: {_ONE_MACHINE}")
    return slots, others


class HostDiscovery:
    """Runs the script every ``period`` seconds on a thread of its own (:meth:`start`);
    :meth:`target` is the last good answer, capped by ``max_np`` (None before one)."""

    def __init__(
        self,
        script: str,
        *,
        max_np: int,
        say: Callable[[str], None],
        period: float = PERIOD_S,
        timeout: float = SCRIPT_TIMEOUT_S,
    ) -> None:
        self.script = script
        self.max_np = max_np
        self._say = say
        self._period = period
        self._timeout = timeout
        self._target: int | None = None
        self._said: str | None = None
        self._stop = threading.Event()
        self._running: subprocess.Popen[bytes] | None = None  # the script, while it runs
        self._thread = threading.Thread(target=self._loop, name="pytfcomm-discovery", daemon=True)

    def target(self) -> int | None:
        """How many ranks the job should have: the last good run's slots, capped."""
        return self._target

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop polling; a run of the script in progress is killed (the launcher's exit,
        Ctrl-C included, never waits for a slow script)."""
        self._stop.set()
        proc = self._running
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self._period)

    def poll(self) -> None:
        """Run the script once and update :meth:`target` (or warn)."""
        try:
            slots, others = parse_output(self._run())
        except (OSError, UsageError, RuntimeError) as exc:
            if self._stop.is_set():  # killed by close(): nothing to say
                return
            self._tell(
                f"warning: host discovery script {self.script!r}: {exc}; the job goes on "
                f"with what it has (target {self._target if self._target is not None else '-'})"
            )
            return
        target = min(slots, self.max_np)
        capped = f", capped by --max-np {self.max_np}" if slots > self.max_np else ""
        note = "; ".join(others)
        self._tell(
            f"host discovery: {slots} slot(s) on this machine{capped}: target {target} "
            f"rank(s){'; warning: ' + note if note else ''}"
        )
        self._target = target

    def _tell(self, message: str) -> None:
        """Say ``message`` unless it is what was said last (a poll a second must not
        repeat the same line)."""
        if message != self._said:
            self._said = message
            self._say(f"elastic: {message}")

    def _run(self) -> str:
        """The script's standard output; RuntimeError when it fails or runs too long."""
        proc = subprocess.Popen(
            [self.script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # on a timeout, its children go with it
            preexec_fn=_child_setup(os.getpid(), None),  # and with the launcher's death
        )
        self._running = proc
        try:
            out, err = proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=5.0)
            raise RuntimeError(f"did not finish within {self._timeout:g} s (killed)") from None
        finally:
            self._running = None
        if proc.returncode != 0:
            why = err.decode(errors="replace").strip().splitlines()
            tail = f": {why[-1][:200]}" if why else ""
            raise RuntimeError(f"exited with code {proc.returncode}{tail}")
        if len(out) > _MAX_OUTPUT:
            raise RuntimeError(f"printed {len(out)} bytes, over {_MAX_OUTPUT}: no host list")
        return out.decode(errors="replace")
