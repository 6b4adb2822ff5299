"""Multi-stream TCP between two simulated hosts: 1 vs k connections per pair.

    sudo python benchmarks/tcp_streams.py --streams 1,2,4 --sizes 1M,16M,64M [--json out.json]

Creates two network namespaces joined by a veth pair (10.232.0.1/.2, deleted afterwards),
runs one rank in each (different PYTFCOMM_HOST_ID, so the pair is "between hosts"), and
times float32 sum all-reduces with PYTFCOMM_TCP_STREAMS = each value (median of --iters,
slowest rank, every result checked). ``--sockbuf`` sets PYTFCOMM_SOCKET_BUFFER: a small
value models hosts whose net.core.rmem_max/wmem_max cap every connection's window, one of
the cases several streams are for. Needs root (CAP_NET_ADMIN) for the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

SUBNET = "10.232.0"
# Rank 0's port in its namespace: the namespaces are made for this run and nothing else
# listens there, so any port is free (pytfcomm._launch.ports cannot look inside them).
PORT = 29500
RUN_TIMEOUT_S = 600  # one --streams value, both ranks


def _worker(rank: int, port: int, sizes: list[int], iters: int, out: str) -> None:
    import pytfcomm

    rows = []
    with pytfcomm.init(rank=rank, size=2, addr=f"{SUBNET}.1:{port}") as comm:
        for nbytes in sizes:
            x = np.full(nbytes // 4, rank + 1, np.float32)
            y = np.empty_like(x)
            for _ in range(3):
                comm.allreduce(x, out=y)
            comm.barrier()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                comm.allreduce(x, out=y)
                times.append(time.perf_counter() - t0)
            rows.append({"bytes": nbytes, "times": times, "ok": bool(np.all(y == 3))})
    with open(out, "w") as f:
        json.dump(rows, f)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _run(ns: list[str], env: dict, sizes: list[int], iters: int) -> list[dict]:
    from benchmarks._launch import local_jobs

    local = local_jobs()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"r{r}.json") for r in range(2)]
        cmds, envs = [], []
        for r in range(2):
            # Loaded by path from a scratch cwd: the installed pytfcomm, not the checkout's.
            code = (
                "import importlib.util as u;"
                f"s = u.spec_from_file_location('tcp_streams', {os.path.abspath(__file__)!r});"
                "m = u.module_from_spec(s); s.loader.exec_module(m);"
                f"m._worker({r}, {PORT}, {sizes!r}, {iters}, {outs[r]!r})"
            )
            cmds.append(["ip", "netns", "exec", ns[r], sys.executable, "-c", code])
            envs.append(dict(os.environ, **env, PYTFCOMM_HOST_ID=f"bench-host-{r}"))
        job = local.run(cmds, envs, cwd=tmp, timeout_s=RUN_TIMEOUT_S)
        if job.status != "ok":
            raise SystemExit(f"a rank failed ({job.reason}): exit codes {job.codes}")
        ranks = [json.load(open(o)) for o in outs]
    rows = []
    for a, b in zip(*ranks, strict=True):
        slowest = np.maximum(a["times"], b["times"])
        rows.append(
            {"bytes": a["bytes"], "median_s": float(np.median(slowest)), "ok": a["ok"] and b["ok"]}
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", default="1,2,4")
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--sockbuf", default="", help="PYTFCOMM_SOCKET_BUFFER for the ranks")
    p.add_argument("--json", default="")
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import _limits
    from benchmarks._units import fmt_bytes, parse_bytes

    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    tag = uuid.uuid4().hex[:6]
    ns, veth = [f"ptcb-{tag}-a", f"ptcb-{tag}-b"], [f"qa{tag}", f"qb{tag}"]
    results: dict[str, list[dict]] = {}
    try:
        for n in ns:
            _ip("netns", "add", n)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for i, n in enumerate(ns):
            _ip("link", "set", veth[i], "netns", n)
            _ip("-n", n, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", veth[i])
            _ip("-n", n, "link", "set", veth[i], "up")
            _ip("-n", n, "link", "set", "lo", "up")
        base = {"PYTFCOMM_SECRET": uuid.uuid4().hex * 2}
        if args.sockbuf:
            base["PYTFCOMM_SOCKET_BUFFER"] = args.sockbuf
        for k in args.streams.split(","):
            results[k] = _run(ns, dict(base, PYTFCOMM_TCP_STREAMS=k), sizes, args.iters)
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=20)
    keys = list(results)
    print(
        f"# 2 ranks, one per network namespace, veth; socket buffer "
        f"{args.sockbuf or 'default'}; median of {args.iters}, slowest rank"
    )
    print(
        "size".rjust(8)
        + "".join(f"  {k} stream(s) ms  busbw".rjust(24) for k in keys)
        + "".join(f"  1/{k}".rjust(8) for k in keys[1:])
    )
    for i, nbytes in enumerate(sizes):
        line = fmt_bytes(nbytes).rjust(8)
        for k in keys:
            r = results[k][i]
            bw = nbytes / r["median_s"] / 1e9  # busbw = algbw at N=2
            line += f"{r['median_s'] * 1e3:14.2f} {bw:7.2f}{'' if r['ok'] else ' WRONG'}".rjust(24)
        for k in keys[1:]:
            line += f"{results[keys[0]][i]['median_s'] / results[k][i]['median_s']:8.2f}"
        print(line)
    print(_limits.summary_line(sizes, kinds=("tcp",)) + " (over lo, not the veth pair)")
    if args.json:
        with open(args.json, "w") as f:
            doc = {"sockbuf": args.sockbuf, "iters": args.iters, "results": results}
            json.dump(doc, f, indent=1)
    if not all(r["ok"] for rows in results.values() for r in rows):
        raise SystemExit("wrong results")


if __name__ == "__main__":
    main()
