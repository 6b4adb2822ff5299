"""pytfcomm-run --bind-to: which CPUs each local rank gets, that every thread of the rank
inherits them, that collectives run bound, and the benchmarks' shim that binds every
library's ranks alike (benchmarks/_pin.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _launcher_run import PY, WORKER, _env, launch
from _paths import ROOT, WORKERS

from pytfcomm._launch import local
from pytfcomm._launch.binding import cpu_list, local_bindings, physical_cores, rank_cpus

sys.path.insert(0, str(ROOT))
from benchmarks import _pin

# --------------------------------------------------------------------------- the rule


def _cores(n: int, per_core: int = 1) -> list[tuple[int, ...]]:
    return [tuple(range(c * per_core, (c + 1) * per_core)) for c in range(n)]


def test_fewer_ranks_than_cores_get_whole_contiguous_blocks() -> None:
    assert rank_cpus(_cores(8), 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert rank_cpus(_cores(8), 3) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert rank_cpus(_cores(2), 2) == [(0,), (1,)]
    assert rank_cpus(_cores(4), 1) == [(0, 1, 2, 3)]


def test_more_ranks_than_cores_alternate_so_neighbours_sit_apart() -> None:
    """4 ranks on 2 cores: 0 and 2 share one, 1 and 3 the other, so each rank's first
    peer (r + 1) runs on the other core."""
    assert rank_cpus(_cores(2), 4) == [(0,), (1,), (0,), (1,)]
    assert rank_cpus(_cores(3), 5) == [(0,), (1,), (2,), (0,), (1,)]


def test_hyperthreads_of_a_core_stay_together() -> None:
    cores = _cores(4, per_core=2)
    assert rank_cpus(cores, 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert rank_cpus(cores, 8)[:5] == [(0, 1), (2, 3), (4, 5), (6, 7), (0, 1)]


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="no CPU"):
        rank_cpus([], 2)
    with pytest.raises(ValueError, match="at least 1"):
        rank_cpus(_cores(2), 0)


def _fake_sysfs(root: Path, topology: dict[int, tuple[int, int] | None]) -> str:
    for cpu, where in topology.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        if where is not None:
            (d / "physical_package_id").write_text(f"{where[0]}\n")
            (d / "core_id").write_text(f"{where[1]}\n")
    return str(root)


def test_cores_are_read_from_sysfs(tmp_path: Path) -> None:
    # Two packages with two cores each; Linux numbers the second thread of each core
    # after all the first ones (cpu4 is cpu0's sibling).
    topo = {c: (c % 4 // 2, c % 2) for c in range(8)}
    sysfs = _fake_sysfs(tmp_path, topo)
    assert physical_cores(range(8), sysfs) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    # Only the CPUs we may use count (a cpuset, taskset around the launcher).
    assert physical_cores({1, 2, 5}, sysfs) == [(1, 5), (2,)]


def test_a_cpu_without_topology_is_a_core_of_its_own(tmp_path: Path) -> None:
    sysfs = _fake_sysfs(tmp_path, {0: (0, 0), 1: (0, 0), 2: None})
    assert physical_cores([0, 1, 2, 3], sysfs) == [(0, 1), (2,), (3,)]


def test_cpu_list_is_tasksets_form() -> None:
    assert cpu_list([3, 0, 1, 2, 6, 8, 9]) == "0-3,6,8-9"
    assert cpu_list([5]) == "5"
    assert _pin.parse_cpu_list("0-3,6,8-9") == {0, 1, 2, 3, 6, 8, 9}


def test_pin_reads_mpiruns_rank_before_the_inherited_one() -> None:
    env = {"BENCH_CPUS": "0;1;0;1", "BENCH_RANK": "0"}
    assert _pin.rank_cpus(env) == {0}
    assert _pin.rank_cpus({**env, "OMPI_COMM_WORLD_RANK": "3"}) == {1}


# --------------------------------------------------------------------------- the launcher


def _launched_cpus(tmp_path: Path, n: int, *args: str, prefix: tuple[str, ...] = ()) -> list:
    launcher = Path(sys.executable).with_name("pytfcomm-run")
    cmd = [*prefix, str(launcher), "-np", str(n), *args, PY, WORKER, "cpus", str(tmp_path)]
    res = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    return [json.loads((tmp_path / f"cpus{r}.json").read_text()) for r in range(n)]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_bind_to_core_gives_each_rank_and_its_threads_its_share(tmp_path: Path, n: int) -> None:
    mine = os.sched_getaffinity(0)
    want = [sorted(c) for c in rank_cpus(physical_cores(mine), n)]
    seen = _launched_cpus(tmp_path, n, "--bind-to", "core")
    assert [s["main"] for s in seen] == want
    assert [s["thread"] for s in seen] == want  # threads inherit it (TF's pools, ours)
    used = set().union(*map(set, want))
    assert used == mine if n >= len(physical_cores(mine)) else used <= mine


def test_binding_is_the_default(tmp_path: Path) -> None:
    want = [sorted(c) for c in local_bindings(2)]
    assert [s["main"] for s in _launched_cpus(tmp_path, 2)] == want


def test_bind_to_none_leaves_every_rank_the_launchers_cpus(tmp_path: Path) -> None:
    mine = sorted(os.sched_getaffinity(0))
    seen = _launched_cpus(tmp_path, 3, "--bind-to", "none")
    assert all(s["main"] == mine and s["thread"] == mine for s in seen)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) missing")
def test_binding_shares_out_only_the_cpus_the_launcher_may_use(tmp_path: Path) -> None:
    """A launcher started inside a narrower CPU set (taskset, a cgroup, a Slurm step)
    never binds a rank outside it."""
    one = min(os.sched_getaffinity(0))
    seen = _launched_cpus(tmp_path, 3, "--bind-to", "core", prefix=("taskset", "-c", str(one)))
    assert [s["main"] for s in seen] == [[one]] * 3


def test_verbose_names_each_ranks_cpus(tmp_path: Path) -> None:
    res = launch("-np", "2", "-v", "--bind-to", "core", PY, "-c", "pass", cwd=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    for r, cpus in enumerate(local_bindings(2)):
        assert f"rank {r} on localhost (local, cpus {cpu_list(cpus)})".encode() in res.stderr


def test_bad_bind_to_exits_2(tmp_path: Path) -> None:
    res = launch("-np", "2", "--bind-to", "socket", PY, "-c", "pass", cwd=tmp_path)
    assert res.returncode == 2
    assert b"invalid choice: 'socket'" in res.stderr


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_bound_ranks_reduce_correctly(tmp_path: Path, transport: str) -> None:
    """4 ranks bound to 2 cores (or whatever this machine has) on each transport."""
    env = _env(PYTFCOMM_TRANSPORT=transport)
    res = launch(
        "-np", "4", "--bind-to", "core", PY, WORKER, "allreduce", str(tmp_path),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    docs = [json.loads(line.split(b"] ", 1)[1]) for line in res.stdout.splitlines()]
    assert sorted(d["rank"] for d in docs) == [0, 1, 2, 3]
    assert all(d["sum"] == [10.0] * 4 for d in docs)


# --------------------------------------------------------------------------- the benchmarks


@pytest.mark.parametrize("bind_to", ["core", "none"])
def test_benchmark_binds_every_backend_as_the_launcher_does(tmp_path: Path, bind_to: str) -> None:
    """benchmarks/allreduce.py --bind-to: each worker's CPUs, as the worker saw them, are
    the launcher's for its rank (or this process's own, unbound), and results stay right."""
    from benchmarks import allreduce as bench

    out = tmp_path / "b.json"
    rc = bench.main(
        [
            "--np", "2", "--sizes", "4K", "--backends", "pytfcomm-tcp", "--iters", "3",
            "--warmup", "1", "--timeout", "120", "--bind-to", bind_to,
            "--json", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads(out.read_text())
    run = doc["backends"]["pytfcomm-tcp"]
    mine = sorted(os.sched_getaffinity(0))
    want = [sorted(c) for c in local_bindings(2)] if bind_to == "core" else [mine, mine]
    assert run["rank_cpus"] == want
    assert doc["meta"]["bind_to"] == bind_to
    assert all(r["ok"] for r in run["rows"])


# --------------------------------------------------------------------------- the rank's threads

COMBINE_THREADS = """
import os
from pathlib import Path
import numpy as np
import tf_setup
tf = tf_setup.tf_with_devices(2)
import pytfcomm
ops = pytfcomm.RingAllReduce()
strategy = tf.distribute.MirroredStrategy(tf_setup.devices(2), cross_device_ops=ops)
x = strategy.run(lambda: tf.ones([1 << 20]))  # 4 MiB per replica: several chunks
got = ops.reduce(tf.distribute.ReduceOp.SUM, x, destinations=x)  # the in-process combine
assert all(float(v[0]) == float(v[-1]) == 2.0 for v in got.values), got
names = [Path(t, "comm").read_text().strip() for t in Path("/proc/self/task").iterdir()]
print("helpers", names.count("ptc-combine"))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to tell apart")
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) missing")
def test_the_combine_uses_only_the_cpus_the_rank_is_bound_to(tmp_path: Path) -> None:
    """A rank bound to one core (--bind-to core with as many ranks as cores) combines its
    device replicas on that core alone: no helper threads to take turns with it."""
    workers = WORKERS
    env = {**_env(), "PYTHONPATH": str(workers)}
    env.pop("PYTFCOMM_LOCAL_THREADS", None)
    # The two probes are independent: run together (the one launcher, pytfcomm._launch),
    # each importing TF on its own.
    prefixes = ((), ("taskset", "-c", str(min(os.sched_getaffinity(0)))))
    logs = [tmp_path / f"probe{i}.log" for i in range(len(prefixes))]
    res = local.run(
        [[*prefix, PY, "-c", COMBINE_THREADS] for prefix in prefixes],
        [env] * len(prefixes),
        cwd=tmp_path,
        timeout_s=240,
        logs=logs,
    )
    assert res.status == "ok", res.log_tail(60)
    helpers = {
        bool(prefix): int(log.read_text().rsplit("helpers", 1)[1].split()[0])
        for prefix, log in zip(prefixes, logs, strict=True)
    }
    assert helpers == {False: min(len(os.sched_getaffinity(0)), 8) - 1, True: 0}
