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

Growing (``--host-discovery-script``, :mod:`.discovery`): while the discovered target is
above the ranks that run (members and joiners not yet admitted), :meth:`joiners` hands
the launcher new processes to start, with worker ids never used before. A joiner's
``init()`` checks in (``join``) and waits, bounded by the time it names; while one
waits, ``poll`` (asked by rank 0 at each commit point, its answer broadcast to every
rank) says an update is pending, the ranks ask for the next membership (``rejoin``)
and the round's decision appends every joiner that waits and still runs, in worker-id
order, after the members. The decision is taken under one lock: a joiner is admitted
by it or waits for the next one, never half. A joiner that gives up, exits or is killed
before a decision is left out; one that fails (non-zero exit), before or after its
admission, stops growth for the rest of this run, so a program that cannot start or
keeps crashing is not started again and again. Once a member exits 0 the job is
finishing: no more joiners.

Several hosts: the service knows each worker's host (``where``; a joiner's from
:meth:`joiners`, which places new workers on the discovered hosts whose slots exceed
the ranks running there). Each reply carries the worker's local rank and size, and
its cross rank and size, worked out for the new membership; the new rendezvous address
comes from ``rendezvous`` (the new rank 0's host: a fresh port here, the job's port on
another host).

The service listens on ``host``: this machine's address as the job's hosts see it
(loopback for a local job), speaks the authenticated JSON lines of
:mod:`pytfcomm._elastic_wire`, serves each connection on a thread of its own with a
deadline on every read, and holds at most a bounded number of connections at once.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._cluster import format_addr
from .._elastic_wire import VERSION, WireError, read_line, sealed, unseal
from .hosts import Host
from .ports import free_port
from .procs import RankSpec

__all__ = ["MembershipService"]

_READ_S = 10.0  # how long a rank gets to send its request once connected
_SLACK_S = 5.0  # a round's longest wait beyond its window (the launcher's own work)
_JOIN_MAX_S = 3600.0  # the longest a joiner may ask to wait for its admission


class Target(Protocol):
    """Where the job should have ranks (:class:`.discovery.HostDiscovery`)."""

    def hosts(self) -> list[Host]: ...


#: This machine, for workers whose host nobody named.
_HERE = Host("localhost", "localhost", 1, True)


def _seconds(value: object) -> bool:
    """Whether ``value`` is a finite number of seconds, at least 0 (JSON allows NaN)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


@dataclass
class _Round:
    """Check-ins for the membership after ``epoch``, open until ``deadline``."""

    epoch: int
    deadline: float
    checked: set[int] = field(default_factory=set)


class MembershipService:
    """The membership of one run of the job, served on ``host`` (see the module doc).

    ``workers`` are the ids of the ranks as started (their first ranks); ``alive`` is
    kept up to date by the launcher through :meth:`exited`. With ``grow`` (the
    discovered target) and ``make_joiner`` (a joiner's :class:`RankSpec` from its worker
    id and host), :meth:`joiners` starts new workers while members and joiners are fewer
    than the target (at most ``max_np``). ``where`` maps workers to their hosts (default:
    this machine); ``rendezvous`` gives the new communicator's address from its rank 0's
    host (default: a free port on ``host``).
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
        grow: Target | None = None,
        make_joiner: Callable[[int, Host], RankSpec] | None = None,
        max_np: int = 0,
        where: dict[int, Host] | None = None,
        rendezvous: Callable[[Host], str] | None = None,
    ) -> None:
        self._host = host
        self._secret = secret
        self._min_np = min_np
        self._window = window
        self._say = say
        self._cond = threading.Condition()
        self.epoch = 0
        self.members: list[int] = sorted(workers)
        self._started = set(workers)  # every worker id this run started, joiners too
        self._alive = set(workers)
        self._round: _Round | None = None
        self._addr = ""
        self._broken: str | None = None
        self._closed = False
        self._grow = grow
        self._make_joiner = make_joiner
        self._next_id = max(workers, default=-1) + 1
        self._pending: set[int] = set()  # joiners started, not admitted, running
        self._ready: set[int] = set()  # of those, the ones waiting in init() to be admitted
        self._joined: set[int] = set()  # joiners admitted
        self._no_growth: str | None = None  # why no more joiners start
        self._max_np = max_np
        self._where: dict[int, Host] = dict(where or {})
        self._rendezvous = rendezvous or (lambda _h: format_addr(host, free_port(host)))
        self._slots = threading.BoundedSemaphore(4 * max(len(workers), max_np) + 4)
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
            if worker in self._pending:  # a joiner that was never admitted
                self._pending.discard(worker)
                self._ready.discard(worker)
                if status != 0:
                    self._stop_growing(f"joiner {worker} exited ({status}) before its admission")
                return True
            if status == 0 and worker in self.members:
                self._stop_growing(None)  # the job is finishing
            elif worker in self._joined:
                self._stop_growing(f"rank started as joiner {worker} was lost ({status})")
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

    def joiners(self) -> list[RankSpec]:
        """The joiners to start now: as many as the target (the discovered slots, capped
        by ``max_np``) is above the ranks that run (members and joiners not admitted
        yet), each with a worker id never used, on a host whose slots exceed the ranks
        running there (in the script's order)."""
        if self._grow is None or self._make_joiner is None:
            return []
        hosts = list(self._grow.hosts())
        if not hosts:
            return []
        target = sum(h.slots for h in hosts)
        if self._max_np > 0:
            target = min(target, self._max_np)
        with self._cond:
            if self._no_growth is not None or self._broken is not None:
                return []
            runs = [w for w in self.members if w in self._alive] + sorted(self._pending)
            if target <= len(runs):
                return []
            on: dict[str, int] = {}
            for w in runs:
                machine = self._host_of(w).machine
                on[machine] = on.get(machine, 0) + 1
            placed: list[tuple[int, Host]] = []
            for h in hosts:
                free = min(h.slots - on.get(h.machine, 0), target - len(runs) - len(placed))
                for _ in range(max(free, 0)):
                    placed.append((self._next_id, h))
                    self._next_id += 1
            for w, h in placed:
                self._where[w] = h
                self._started.add(w)
                self._alive.add(w)
                self._pending.add(w)
        if not placed:
            return []
        where = ", ".join(f"{w}{'' if h.local else ' on ' + h.target}" for w, h in placed)
        self._say(
            f"elastic: {len(runs)} rank(s) run, the target is {target}: starting joiner(s) "
            f"{where}; they join at the next commit point"
        )
        return [self._make_joiner(w, h) for w, h in placed]

    def _host_of(self, worker: int) -> Host:
        return self._where.get(worker, _HERE)

    def _stop_growing(self, why: str | None) -> None:
        """No more joiners this run (the lock is held); ``why`` is said, None is not."""
        if self._no_growth is None and self._grow is not None:
            self._no_growth = why or "the job is finishing"
            if why is not None and not self._closed:
                self._say(f"elastic: {why}: no more joiners start in this run")

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
        joined = sorted(w for w in self._ready if w in self._alive)
        self._round = None
        if len(new) < self._min_np:
            self._broken = (
                f"only {len(new)} rank(s) checked in within the {self._window:g} s window, "
                f"fewer than --min-np {self._min_np}"
            )
            self._say(f"elastic: {self._broken}; the job cannot go on in place")
        else:
            self.epoch += 1
            self.members = new + joined
            self._ready.difference_update(joined)
            self._pending.difference_update(joined)
            self._joined.update(joined)
            self._addr = self._rendezvous(self._host_of(self.members[0]))
            self._say(
                f"elastic: epoch {self.epoch}: {len(self.members)} rank(s) go on (started as "
                f"{', '.join(map(str, self.members))}); lost: "
                f"{', '.join(map(str, lost)) or 'none'}; joined: "
                f"{', '.join(map(str, joined)) or 'none'}; rendezvous {self._addr}"
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
            return self._membership(worker)

    def _membership(self, worker: int) -> dict[str, Any]:
        """The current membership as ``worker`` is told it (the lock is held): its rank,
        and its place among the ranks of its host (local) and among the hosts' ranks
        with its local rank (cross), as pytfcomm-run's plan gives them."""
        machines = [self._host_of(w).machine for w in self.members]
        local = [m == machines[self.members.index(worker)] for m in machines]
        local_rank = sum(local[: self.members.index(worker)])
        rank_on_host: list[int] = []
        count: dict[str, int] = {}
        for m in machines:
            rank_on_host.append(count.get(m, 0))
            count[m] = count.get(m, 0) + 1
        peers = [w for w, r in zip(self.members, rank_on_host, strict=True) if r == local_rank]
        return {
            "ok": True,
            "epoch": self.epoch,
            "rank": self.members.index(worker),
            "size": len(self.members),
            "local_rank": local_rank,
            "local_size": sum(local),
            "cross_rank": peers.index(worker),
            "cross_size": len(peers),
            "addr": self._addr,
            "members": list(self.members),
        }

    def _admit(self, worker: int, wait: float) -> dict[str, Any]:
        """The reply to joiner ``worker``: the first membership with it, decided within
        ``wait`` seconds; else it is left out (atomically: never admitted later)."""
        with self._cond:
            if self._broken is not None:
                return {"ok": False, "error": f"{self._broken}.", "lost": False}
            if worker not in self._pending or worker in self._ready:
                return self._refusal(worker, -1)
            self._ready.add(worker)
            self._cond.notify_all()
            deadline = time.monotonic() + wait
            while worker not in self.members:
                broken = self._why_broken()
                if broken is not None:
                    self._ready.discard(worker)
                    return {"ok": False, "error": f"{broken}.", "lost": False}
                if worker not in self._ready:  # it exited meanwhile
                    return {"ok": False, "error": "this joiner exited.", "lost": False}
                if time.monotonic() >= deadline:
                    self._ready.discard(worker)
                    self._pending.discard(worker)
                    return {
                        "ok": False,
                        "lost": False,
                        "error": (
                            f"no commit point admitted this joiner (worker {worker}) within "
                            f"{wait:g} s: the ranks call pytfcomm.elastic.hosts_updated() "
                            "(hvd: state.commit()) after each commit? Raise "
                            "PYTFCOMM_CONNECT_TIMEOUT if their steps take longer. It is left "
                            "out of the job."
                        ),
                    }
                self._cond.wait(timeout=0.1)
            return self._membership(worker)

    def _poll(self, worker: int, epoch: int) -> dict[str, Any]:
        """The reply to rank ``worker`` asking at a commit point whether joiners wait."""
        with self._cond:
            if worker not in self.members:
                return self._refusal(worker, epoch)
            pending = epoch == self.epoch and any(w in self._alive for w in self._ready)
            return {"ok": True, "pending": pending, "epoch": self.epoch}

    def _why_broken(self) -> str | None:
        """Why the job cannot go on in place (other threads set it), or None."""
        return self._broken

    def _refusal(self, worker: int, epoch: int) -> dict[str, Any]:
        if epoch > self.epoch or worker not in self._started:
            return {
                "ok": False,
                "lost": True,
                "error": (
                    f"this process (started as rank {worker}, membership epoch {epoch}) "
                    f"is not one this run of the job started (it is at epoch {self.epoch}, "
                    "ranks started as "
                    f"{', '.join(map(str, sorted(self._started)))}): a stale "
                    "PYTFCOMM_ELASTIC_* variable, or another job's process. It is refused."
                ),
            }
        if epoch < 0:  # a join request
            return {
                "ok": False,
                "lost": True,
                "error": (
                    f"worker {worker} is no joiner waiting for its admission (admitted, "
                    "left out, or asking twice). It is refused."
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
                op, worker, epoch = body.get("op"), body.get("id"), body.get("epoch")
                cnonce, wait = body.get("nonce"), body.get("wait")
                if (
                    op not in ("rejoin", "join", "poll")
                    or isinstance(worker, bool)
                    or not isinstance(worker, int)
                    or isinstance(epoch, bool)
                    or not isinstance(epoch, int)
                    or not isinstance(cnonce, str)
                    or (op == "join" and not _seconds(wait))
                ):
                    raise WireError("not a membership request")
                if op == "rejoin":
                    reply = self._answer(worker, epoch)
                elif op == "join":
                    assert isinstance(wait, (int, float))
                    reply = self._admit(worker, min(float(wait), _JOIN_MAX_S))
                else:
                    reply = self._poll(worker, epoch)
                if not reply["ok"]:
                    who = f"rank started as {worker}" if op == "rejoin" else f"{op} of {worker}"
                    self._say(f"elastic: refused {who}: {reply['error']}")
                conn.sendall(sealed(self._secret, "rep", cnonce, reply))
        except (OSError, WireError) as exc:
            self._say(f"elastic: dropped a connection to the membership service: {exc}")
        finally:
            self._slots.release()
