"""One-off: where do pytfcomm's extra 0.25-0.3 ms per NCCL call come from with 2 ranks on one GPU?
Per size, interleaved per iteration (cold after a barrier, as benchmarks/nccl.py):
torch+sync, torch+event polled with 20 us sleeps, torch+event busy-polled, pytfcomm NCCL."""
import os, socket, statistics, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def rank(r, ports, q):
    import pytfcomm
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=r, world_size=2)
    comm = pytfcomm.init(rank=r, size=2, addr=f"127.0.0.1:{ports[1]}")
    for nbytes in (4096, 64 << 20, 1 << 30):
        x = torch.empty(nbytes // 4, device="cuda")
        def t_sync():
            dist.all_reduce(x); torch.cuda.synchronize()
        def t_sleep():
            dist.all_reduce(x); e = torch.cuda.Event(); e.record()
            while not e.query(): time.sleep(20e-6)
        def t_spin():
            dist.all_reduce(x); e = torch.cuda.Event(); e.record()
            while not e.query(): pass
        def t_ptc():
            comm.allreduce(x, out=x)
        ways = {"torch+sync": t_sync, "torch+sleep20us": t_sleep, "torch+spin": t_spin, "pytfcomm": t_ptc}
        res = {w: [] for w in ways}
        iters = 20 if nbytes <= 64 << 20 else 6
        for i in range(3 + iters):
            for w, fn in ways.items():
                x.fill_(r + 1); dist.barrier(); torch.cuda.synchronize()
                t0 = time.perf_counter(); fn(); dt = time.perf_counter() - t0
                assert bool((x == 3).all()), w
                if i >= 3: res[w].append(dt)
        if r == 0:
            q.put((nbytes, {w: statistics.median(v) * 1e6 for w, v in res.items()}))
    comm.close(); dist.destroy_process_group()

if __name__ == "__main__":
    os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    ports = (free_port(), free_port())
    ps = [ctx.Process(target=rank, args=(r, ports, q)) for r in range(2)]
    for p in ps: p.start()
    for _ in range(3):
        nbytes, m = q.get(timeout=150)
        print(f"{nbytes >> 10} KiB: " + ", ".join(f"{w} {v:.0f} us" for w, v in m.items()), flush=True)
    for p in ps: p.join(30)
