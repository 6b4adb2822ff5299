"""A process that has imported TensorFlow once and forks test ranks from it (not a test module).

Importing TensorFlow costs a rank 3-5 s of CPU; the multi-process TF tests start
hundreds of ranks on a 2-core machine. tests/_warm.py starts this process once
per pytest session; each request forks a child that becomes what
``python tests/_rank_entry.py ARGV...`` would have been: its own session, the
request's environment, working directory and log file, then
``_rank_entry.main()`` and the interpreter's normal exit (atexit handlers run).

Protocol on the socket (fd in argv[1]): length-prefixed pickles.
  client -> {"argv": [...], "env": {...}, "cwd": str, "log": str}
  zygote -> {"ready": True} once TensorFlow is imported
          -> {"pid": int} or {"error": str} per request, in request order
          -> {"exit": pid, "status": wait status} when a child ends
End of file on the socket: the zygote kills every child's process group and exits.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import socket
import struct
import sys

_LEN = struct.Struct("!I")


def send(sock: socket.socket, msg: dict) -> None:
    data = pickle.dumps(msg)
    sock.sendall(_LEN.pack(len(data)) + data)


def recv(sock: socket.socket) -> dict | None:
    """One message, or None at end of file."""
    head = _recv_exact(sock, _LEN.size)
    if head is None:
        return None
    body = _recv_exact(sock, _LEN.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _become_rank(req: dict, ready_w: int) -> None:
    """In the forked child: take on the request's session, fds, environment and cwd."""
    os.setsid()
    fd = os.open(req["log"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # The parent answers the pid only now: killpg(pid) works and the log exists.
    os.write(ready_w, b"x")
    os.close(ready_w)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = list(req["argv"])
    # A fresh interpreter seeds NumPy's global generator from the OS; a forked one
    # would repeat the zygote's sequence in every rank.
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def serve(sock: socket.socket) -> dict | None:
    """The zygote's loop. Returns the request in a forked child, None when the zygote ends."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                live.discard(pid)
                send(sock, {"exit": pid, "status": status})
        if sock not in readable:
            continue
        req = recv(sock)
        if req is None:
            for pid in live:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return None
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # As a fresh interpreter whose Ctrl-C works, even when the suite itself was
            # started with SIGINT ignored (a shell's `cmd &`, which the zygote inherits).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for fd in (wake_r, wake_w):
                os.close(fd)
            sock.close()
            _become_rank(req, ready_w)
            return req
        os.close(ready_w)
        ok = select.select([ready_r], [], [], 30)[0] and os.read(ready_r, 1) == b"x"
        os.close(ready_r)
        live.add(pid)
        if ok:
            send(sock, {"pid": pid})
        else:
            os.kill(pid, signal.SIGKILL)
            send(sock, {"error": f"forked rank {pid} did not start its session within 30 s"})


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
    import tensorflow  # noqa: F401
    import tf_setup  # noqa: F401  (what the TF workers import first: TF's log level)

    # What TF's import left behind goes out of the cyclic collector's sight (it
    # is all alive: nothing was collectable after the collect). Else every rank's
    # collections, the one at its exit above all, walk those millions of objects
    # and write to their headers, copying most of the zygote's heap page by page:
    # 1.2-1.5 s of CPU per rank for nothing. Reference counting is unchanged, and
    # what a rank creates itself is collected as in a cold rank.
    gc.collect()
    gc.freeze()
    send(sock, {"ready": True})
    req = serve(sock)
    if req is None:
        return
    import _rank_entry

    _rank_entry.main()


if __name__ == "__main__":
    main()
