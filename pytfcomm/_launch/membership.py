"""``pytfcomm-run --elastic``: the launcher decides who is left after a rank is lost.

The launcher is the single authority on membership (Horovod's elastic driver plays the
same part). Every membership has an epoch, 0 for the ranks as started. When a rank's
collective fails with a lost peer, the rank checks in (``pytfcomm.elastic.reform``) with
the epoch it knows; the first check-in of an epoch opens a round. The round closes as
soon as every member of that epoch whose process still runs has checked in, or when the
check-in window (``--elastic-window``) has passed. The next membership is the members
that checked in and still run, in their old rank order; each gets its new rank, the size
and a fresh rendezvous address, the same for all. A rank that is not a member of the
current epoch, or asks with an older epoch (it missed the round: stopped, partitioned),
is refused with a message saying so; it is never re-admitted.

When fewer than ``--min-np`` would be left, the round fails: every waiting rank gets an
error, exits, and the launcher falls back to ``--restarts`` (stop all, start all again).

The service listens on the rendezvous host (loopback for a local job), speaks the
authenticated JSON lines of :mod:`pytfcomm._elastic_wire`, serves each connection on a
thread of its own with a deadline on every read, and holds at most a bounded number of
connections at once.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._cluster import format_addr
from .._elastic_wire import VERSION, WireError, read_line, sealed, unseal
from .ports import free_port

__all__ = ["MembershipService"]

_READ_S = 10.0  # how long a rank gets to send its request once connected
_SLACK_S = 5.0  # a round's longest wait beyond its window (the launcher's own work)


@dataclass
class _Round:
    """Check-ins for the membership after ``epoch``, open until ``deadline``."""

    epoch: int
    deadline: float
    checked: set[int] = field(default_factory=set)


class MembershipService:
    """The membership of one run of the job, served on ``host`` (see the module doc).

    ``workers`` are the ids of the ranks as started (their first ranks); ``alive`` is
    kept up to date by the launcher through :meth:`exited`.
    """

    def __init__(
        self,
        host: str,
        secret: str,
        workers: Sequence[int],
        *,
        min_np: int,
        window: float,
        say: Callable[[str], None],
    ) -> None:
        self._host = host
        self._secret = secret
        self._min_np = min_np
        self._window = window
        self._say = say
        self._cond = threading.Condition()
        self.epoch = 0
        self.members: list[int] = sorted(workers)
        self._workers = frozenset(workers)
        self._alive = set(workers)
        self._round: _Round | None = None
        self._addr = ""
        self._broken: str | None = None
        self._closed = False
        self._slots = threading.BoundedSemaphore(4 * len(workers) + 4)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.addr = format_addr(host, int(self._sock.getsockname()[1]))
        self._thread = threading.Thread(target=self._accept, name="pytfcomm-elastic", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the launcher's side
    def exited(self, worker: int, status: int) -> bool:
        """Record that ``worker``'s process ended with ``status``; whether the job goes on.

        True when the job can go on without it: it succeeded, it was no member any more,
        or at least ``--min-np`` members still run. False otherwise (the launcher then
        stops the job; waiting ranks get an error).
        """
        with self._cond:
            self._alive.discard(worker)
            self._cond.notify_all()
            if status == 0 or worker not in self.members:
                return True
            left = [w for w in self.members if w in self._alive]
            if self._broken is None and len(left) >= self._min_np:
                return True
            if self._broken is None:
                self._broken = (
                    f"only {len(left)} rank(s) are left, fewer than --min-np {self._min_np}"
                )
            return False

    def is_member(self, worker: int) -> bool:
        """Whether ``worker`` belongs to the current membership."""
        with self._cond:
            return worker in self.members

    def close(self) -> None:
        """Stop serving; waiting ranks get an error."""
        with self._cond:
            self._closed = True
            self._broken = self._broken or "the launcher is stopping this run of the job"
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._thread.join(timeout=2.0)

    # ------------------------------------------------------------------ decisions
    def _decide(self, rnd: _Round) -> None:
        """Close ``rnd`` (the lock is held): the next membership, or a broken job."""
        new = [w for w in self.members if w in rnd.checked and w in self._alive]
        lost = [w for w in self.members if w not in new]
        self._round = None
        if len(new) < self._min_np:
            self._broken = (
                f"only {len(new)} rank(s) checked in within the {self._window:g} s window, "
                f"fewer than --min-np {self._min_np}"
            )
            self._say(f"elastic: {self._broken}; the job cannot go on in place")
        else:
            self.epoch += 1
            self.members = new
            self._addr = format_addr(self._host, free_port(self._host))
            self._say(
                f"elastic: epoch {self.epoch}: {len(new)} rank(s) go on (started as "
                f"{', '.join(map(str, new))}); lost: {', '.join(map(str, lost)) or 'none'}"
            )
        self._cond.notify_all()

    def _answer(self, worker: int, epoch: int) -> dict[str, Any]:
        """The reply to ``worker`` asking after ``epoch``; waits for the round (bounded)."""
        with self._cond:
            if self._broken is not None:
                return {"ok": False, "error": f"{self._broken}.", "lost": False}
            if worker not in self.members or epoch != self.epoch:
                return self._refusal(worker, epoch)
            if self._round is None:
                self._round = _Round(epoch, time.monotonic() + self._window)
            rnd = self._round
            rnd.checked.add(worker)
            self._cond.notify_all()
            hard = rnd.deadline + _SLACK_S
            while self.epoch == epoch and self._why_broken() is None:
                now = time.monotonic()
                if self._round is rnd:
                    waiting = [w for w in self.members if w in self._alive and w not in rnd.checked]
                    if not waiting or now >= rnd.deadline:
                        self._decide(rnd)
                        continue
                if now >= hard:
                    return {"ok": False, "error": "the launcher decided nothing in time."}
                self._cond.wait(timeout=0.1)
            broken = self._why_broken()
            if broken is not None:
                return {"ok": False, "error": f"{broken}.", "lost": False}
            if worker not in self.members:
                return self._refusal(worker, epoch)
            return {
                "ok": True,
                "epoch": self.epoch,
                "rank": self.members.index(worker),
                "size": len(self.members),
                "addr": self._addr,
                "members": list(self.members),
            }

    def _why_broken(self) -> str | None:
        """Why the job cannot go on in place (other threads set it), or None."""
        return self._broken

    def _refusal(self, worker: int, epoch: int) -> dict[str, Any]:
        if epoch > self.epoch or worker not in self._workers:
            return {
                "ok": False,
                "lost": True,
                "error": (
                    f"this process (started as rank {worker}, membership epoch {epoch}) "
                    f"is not one this run of the job started (it is at epoch {self.epoch}, "
                    "ranks started as "
                    f"{', '.join(map(str, sorted(self._workers)))}): a stale "
                    "PYTFCOMM_ELASTIC_* variable, or another job's process. It is refused."
                ),
            }
        return {
            "ok": False,
            "lost": True,
            "error": (
                f"the launcher declared this process (started as rank {worker}) lost: it "
                f"asked to go on from membership epoch {epoch}, but the job is at epoch "
                f"{self.epoch} without it (it did not check in within the "
                f"{self._window:g} s window: stopped, hung or cut off). It is not "
                "re-admitted; the job goes on without it."
            ),
        }

    # ------------------------------------------------------------------ serving
    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()  # more connections than ranks could make: drop it
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                nonce = secrets.token_hex(16)
                conn.sendall(f'{{"v": {VERSION}, "nonce": "{nonce}"}}\n'.encode())
                line = read_line(conn, time.monotonic() + _READ_S)
                body = unseal(self._secret, "req", nonce, line)
                worker, epoch, cnonce = body.get("id"), body.get("epoch"), body.get("nonce")
                if (
                    body.get("op") != "rejoin"
                    or not isinstance(worker, int)
                    or not isinstance(epoch, int)
                    or not isinstance(cnonce, str)
                ):
                    raise WireError("not a rejoin request")
                reply = self._answer(worker, epoch)
                if not reply["ok"]:
                    self._say(f"elastic: refused rank started as {worker}: {reply['error']}")
                conn.sendall(sealed(self._secret, "rep", cnonce, reply))
        except (OSError, WireError) as exc:
            self._say(f"elastic: dropped a connection to the membership service: {exc}")
        finally:
            self._slots.release()
