"""Start TensorFlow test ranks warm: forked from a zygote that imported TF once.

tests/_harness.py asks :func:`spawn` first and starts a cold ``python
_rank_entry.py`` when it answers None. A rank starts warm only where that cannot
change what it runs:

* its worker module uses TensorFlow (its source names ``tensorflow``, ``keras``
  or ``tf_setup``), so a cold rank would import it first thing anyway;
* its environment differs from the one the zygote imported TF under only in
  variables read after import (``PYTFCOMM_*``, ``HOROVOD_*``, ``PYTEST_*``,
  ``TF_CONFIG``). ``TF_USE_LEGACY_KERAS`` is not one of them: ``import
  tensorflow`` imports Keras 3 unless it is set, tf-keras if it is. Ranks
  given it (and nothing else read at import) fork from a second zygote that
  imported TF with it set (:data:`VARIANT_KEYS`). A test that gives its ranks
  other variables gets cold ranks; if the session's own environment changed,
  a new zygote takes over (at most MAX_RESTARTS times);
* it is not started under a command prefix (``ip netns exec``).

``PYTFCOMM_TEST_COLD=1`` starts every rank cold. One difference stays: warm
ranks share the zygote's ``str`` hash seed (cold ones each draw their own).
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import _zygote

TESTS = Path(__file__).resolve().parent
_USES_TF = re.compile(r"\b(tensorflow|keras|tf_setup)\b")
_LAZY_PREFIXES = ("PYTFCOMM_", "HOROVOD_", "PYTEST_")
_LAZY_KEYS = {"TF_CONFIG"}
# Variables read at import that get a zygote of their own, imported with the value a
# test gives its ranks, when they are all that differs from the session's environment.
VARIANT_KEYS = ("TF_USE_LEGACY_KERAS",)
READY_S = 180  # the zygote's TF import, on a busy 2-core machine


class WarmProc:
    """The subset of ``subprocess.Popen`` the harness uses, for a rank the zygote forked."""

    def __init__(self, zygote: _Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _Zygote:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self._owner = os.getpid()
        self._dir = tempfile.mkdtemp(prefix="pytfcomm-zygote-")
        ours, theirs = socket.socketpair()
        with open(Path(self._dir) / "zygote.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(TESTS / "_zygote.py"), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd=self._dir,  # never the repo root: the installed package only
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one request and its answer at a time
        self._answers: queue.Queue[dict] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._pids: list[int] = []
        self._changed = threading.Condition()
        self._ready = threading.Event()
        self.alive = True
        threading.Thread(target=self._read, name="pytfcomm-zygote-reader", daemon=True).start()
        if not self._ready.wait(READY_S):
            log_text = (Path(self._dir) / "zygote.log").read_text(errors="replace")[-2000:]
            self.close()
            raise RuntimeError(f"the TF zygote was not ready within {READY_S} s:\n{log_text}")

    def _read(self) -> None:
        try:
            while (msg := _zygote.recv(self._sock)) is not None:
                if "ready" in msg:
                    self._ready.set()
                elif "exit" in msg:
                    with self._changed:
                        self._exits[msg["exit"]] = os.waitstatus_to_exitcode(msg["status"])
                        self._changed.notify_all()
                else:
                    self._answers.put(msg)
        except OSError:
            pass
        with self._changed:
            self.alive = False
            self._changed.notify_all()
        self._answers.put({"error": "the TF zygote exited"})

    def spawn(self, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> WarmProc:
        with self._lock:
            _zygote.send(
                self._sock, {"argv": argv, "env": dict(env), "cwd": str(cwd), "log": str(log)}
            )
            answer = self._answers.get(timeout=60)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        self._pids.append(answer["pid"])
        return WarmProc(self, answer["pid"])

    def busy(self) -> bool:
        """Whether a rank it forked may still run."""
        with self._changed:
            return any(pid not in self._exits for pid in self._pids)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The rank's exit code (-signal when killed), or None if it still runs at the timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._exits:
                if not self.alive:  # nobody will report it: it is gone or an orphan
                    return None if os.path.exists(f"/proc/{pid}") else -signal.SIGKILL
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left if left is None else min(left, 1.0))
            return self._exits[pid]

    def close(self) -> None:
        if os.getpid() != self._owner:  # a test's forked child exiting: not its zygote
            return
        self.alive = False
        try:  # end of file: the zygote kills what is left and exits
            self._sock.shutdown(socket.SHUT_RDWR)  # also ends the reader's recv
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


_zygote_instance: _Zygote | None = None
_broken: str | None = None
# The zygotes for VARIANT_KEYS, by the values that differ; None: it failed to start.
_variants: dict[tuple[tuple[str, str | None], ...], _Zygote | None] = {}
_restarts = [0]
MAX_RESTARTS = 3  # each costs one TF import


def _fits(env: Mapping[str, str], base: Mapping[str, str]) -> bool:
    for key in set(env) | set(base):
        if env.get(key) != base.get(key):
            if not (key in _LAZY_KEYS or key.startswith(_LAZY_PREFIXES)):
                return False
    return True


@functools.cache
def _module_uses_tf(module: str) -> bool:
    path = TESTS / "workers" / (module + ".py")
    return path.exists() and bool(_USES_TF.search(path.read_text()))


def _uses_tf(target: str) -> bool:
    return _module_uses_tf(target.split(":")[0])


def _variant_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The session's environment with env's VARIANT_KEYS, if env differs from it only
    in those and in variables read after import; else None."""
    variant = dict(os.environ)
    for key in VARIANT_KEYS:
        if key in env:
            variant[key] = env[key]
        else:
            variant.pop(key, None)
    return variant if _fits(env, variant) else None


def _spawn_variant(
    argv: list[str], env: Mapping[str, str], cwd: Path, log: Path
) -> WarmProc | None:
    """Fork the rank from the zygote of env's VARIANT_KEYS, or None (start it cold)."""
    variant = _variant_env(env)
    if variant is None:
        return None
    key = tuple((k, variant.get(k)) for k in VARIANT_KEYS)
    zygote = _variants.get(key)
    if key in _variants and (zygote is None or not zygote.alive):
        return None  # it failed to start, or died: cold from now on
    if zygote is None:
        try:
            zygote = _variants[key] = _Zygote(variant)
        except (OSError, RuntimeError) as exc:
            _variants[key] = None
            print(f"tests/_warm.py: starting ranks of {key} cold: {exc}", file=sys.stderr)
            return None
        atexit.register(zygote.close)
    if not _fits(env, zygote.env):  # the session's environment changed since it started
        return None
    try:
        return zygote.spawn(argv, env, cwd, log)
    except (OSError, RuntimeError, queue.Empty) as exc:
        print(f"tests/_warm.py: starting {argv[1]} cold: {exc!r}", file=sys.stderr)
        return None


def spawn(argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> WarmProc | None:
    """Fork the rank ``python argv...`` would start from the zygote, or None (start it cold).

    ``argv[1]`` is the target ("module:function").
    """
    global _zygote_instance, _broken
    if os.environ.get("PYTFCOMM_TEST_COLD") == "1" or _broken or not _uses_tf(argv[1]):
        return None
    if not _fits(env, os.environ):
        return _spawn_variant(argv, env, cwd, log)
    zygote = _zygote_instance
    if zygote is not None and zygote.alive and not _fits(env, zygote.env):
        if zygote.busy() or _restarts[0] >= MAX_RESTARTS:
            return None
        zygote.close()  # the session's environment changed since it started
        _restarts[0] += 1
    if zygote is None or not zygote.alive:
        try:
            zygote = _zygote_instance = _Zygote()
        except (OSError, RuntimeError) as exc:
            _broken = str(exc)
            print(f"tests/_warm.py: starting ranks cold from now on: {exc}", file=sys.stderr)
            return None
        atexit.register(zygote.close)
    try:
        return zygote.spawn(argv, env, cwd, log)
    except (OSError, RuntimeError, queue.Empty) as exc:
        print(f"tests/_warm.py: starting {argv[1]} cold: {exc!r}", file=sys.stderr)
        return None
