"""``pytfcomm-run --elastic --host-discovery-script PATH``: where the job wants ranks.

Horovod's contract: PATH is an executable that prints the hosts the job may use, one a
line, ``host:slots`` or ``host`` (one slot). The launcher runs it every
:data:`PERIOD_S` seconds, each run bounded by :data:`SCRIPT_TIMEOUT_S` (then its whole
process group is killed). The answer is a host list: this machine's entries
(``localhost``, 127.x, this host's name or address) count as one host, another host's
repeated lines add up. The job's target size is their slots, capped by ``--max-np``;
new workers go to hosts whose slots exceed the ranks running there (``membership.py``),
other hosts over ssh. When the job reaches no other host (its membership service
listens on loopback: no remote host in ``-H`` and no ``--bind``), another host's entry
is left out with a warning. A run that fails (non-zero exit, timeout, a line that is
no ``host[:slots]``) changes nothing: the launcher warns once per distinct problem and
keeps the last answer. A target below the running ranks stops nothing (ranks leave
only when they are lost).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from .hosts import Host, UsageError, _parse_entry
from .procs import _child_setup

__all__ = ["PERIOD_S", "SCRIPT_TIMEOUT_S", "HostDiscovery", "parse_output"]

PERIOD_S = 1.0  # between two runs of the script
SCRIPT_TIMEOUT_S = 10.0  # one run's longest time
_MAX_OUTPUT = 64 * 1024  # more than this is no host list
_LOOPBACK_ONLY = (
    "this job reaches no other host (pass --bind ADDR, this machine's address as the other "
    "hosts see it, or list a remote host in -H), so its slots are left out"
)


def parse_output(text: str, remote_ok: bool = True) -> tuple[list[Host], list[str]]:
    """The hosts in the script's output, in order, each once (slots added up; this
    machine's entries as one), and warnings about hosts left out (``remote_ok`` False:
    every other host). UsageError (naming the line) when a line is no ``host[:slots]``."""
    hosts: dict[str, Host] = {}
    others: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        host = _parse_entry(line, f"line {n}")
        if not host.local and not remote_ok:
            others.append(f"host {host.name!r} (line {n}) is not this machine: {_LOOPBACK_ONLY}")
            continue
        seen = hosts.get(host.machine)
        slots = host.slots + (seen.slots if seen else 0)
        hosts[host.machine] = Host((seen or host).target, (seen or host).name, slots, host.local)
    return list(hosts.values()), others


def describe_hosts(hosts: list[Host]) -> str:
    """'3 slot(s) on this machine' or '4 slot(s): this machine 2, node2 2'."""
    total = sum(h.slots for h in hosts)
    if all(h.local for h in hosts):
        return f"{total} slot(s) on this machine"
    parts = ", ".join(f"{'this machine' if h.local else h.target} {h.slots}" for h in hosts)
    return f"{total} slot(s): {parts}"


class HostDiscovery:
    """Runs the script every ``period`` seconds on a thread of its own (:meth:`start`);
    :meth:`hosts` is the last good answer, :meth:`target` its slots capped by
    ``max_np`` (None before one). ``remote_ok``: whether other hosts' entries count."""

    def __init__(
        self,
        script: str,
        *,
        max_np: int,
        say: Callable[[str], None],
        period: float = PERIOD_S,
        timeout: float = SCRIPT_TIMEOUT_S,
        remote_ok: bool = False,
    ) -> None:
        self.script = script
        self.remote_ok = remote_ok
        self.max_np = max_np
        self._say = say
        self._period = period
        self._timeout = timeout
        self._target: int | None = None
        self._hosts: list[Host] = []
        self._said: str | None = None
        self._stop = threading.Event()
        self._running: subprocess.Popen[bytes] | None = None  # the script, while it runs
        self._thread = threading.Thread(target=self._loop, name="pytfcomm-discovery", daemon=True)

    def target(self) -> int | None:
        """How many ranks the job should have: the last good run's slots, capped."""
        return self._target

    def hosts(self) -> list[Host]:
        """The hosts of the last good answer with their slots (empty before one)."""
        return self._hosts

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
            hosts, others = parse_output(self._run(), self.remote_ok)
        except (OSError, UsageError, RuntimeError) as exc:
            if self._stop.is_set():  # killed by close(): nothing to say
                return
            self._tell(
                f"warning: host discovery script {self.script!r}: {exc}; the job goes on "
                f"with what it has (target {self._target if self._target is not None else '-'})"
            )
            return
        slots = sum(h.slots for h in hosts)
        target = min(slots, self.max_np)
        capped = f", capped by --max-np {self.max_np}" if slots > self.max_np else ""
        note = "; ".join(others)
        self._tell(
            f"host discovery: {describe_hosts(hosts)}{capped}: target {target} "
            f"rank(s){'; warning: ' + note if note else ''}"
        )
        self._hosts = hosts
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
