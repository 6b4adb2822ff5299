"""Is the carried NCCL usable here: its version through torch, and a 2-rank all-reduce on one GPU."""
import os, socket, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank(r, port):
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2)
    x = torch.full((1 << 20,), float(r + 1), device="cuda")
    dist.all_reduce(x); torch.cuda.synchronize()
    ok = bool((x == 3).all())
    print(f"rank {r}: 2-rank all-reduce {'ok' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)

if __name__ == "__main__":
    print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version(), flush=True)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    t0 = time.time()
    mp.spawn(rank, args=(port,), nprocs=2)
    print(f"2 ranks done in {time.time() - t0:.1f} s")
