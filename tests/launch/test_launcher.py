"""pytfcomm-run: environment per rank, output prefixes, exit codes, failures, signals, ssh.

Every launcher run here is bounded (``timeout=``) and killed with its whole process group
if a test fails; ranks run tests/workers/launcher_worker.py on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _launcher_run import (
    FAKE_SSH,
    PY,
    WORKER,
    _env,
    launch,
    started,
    wait_files,
    wait_gone,
)

import pytfcomm
from pytfcomm import _cluster
from pytfcomm import launcher as launcher_mod
from pytfcomm._launch import gpus as gpus_mod
from pytfcomm._launch import hosts as hosts_mod
from pytfcomm._launch import plan as plan_mod
from pytfcomm._launch.remote import remote_command
from pytfcomm.errors import ConfigError

LINE_RE = re.compile(rb"^\[(\d+)\] (.*)$", re.DOTALL)


@pytest.fixture(autouse=True)
def _kill_leftovers(tmp_path: Path) -> Iterator[None]:
    """After each test, SIGKILL any worker (or its child) still alive: no strays on failure."""
    yield
    for path in tmp_path.glob("pid*"):
        for pid in (int(p) for p in path.read_text().split()):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"launcher_worker" in cmdline or cmdline.startswith(b"sleep"):
                    os.kill(pid, signal.SIGKILL)


def by_rank(stream: bytes) -> dict[int, list[bytes]]:
    """Split prefixed output into each rank's lines; every line must carry a prefix."""
    out: dict[int, list[bytes]] = {}
    for line in stream.split(b"\n")[:-1]:
        m = LINE_RE.match(line)
        assert m, f"line without a rank prefix: {line[:120]!r}"
        out.setdefault(int(m.group(1)), []).append(m.group(2))
    assert stream.endswith(b"\n") or not stream
    return out


def read_views(tmp_path: Path, n: int) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]


# --------------------------------------------------------------------------- environment


def test_every_rank_gets_its_environment_and_one_secret(tmp_path: Path) -> None:
    res = launch("-np", "3", "-v", PY, WORKER, "env", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    views = read_views(tmp_path, 3)
    assert [v["PYTFCOMM_RANK"] for v in views] == ["0", "1", "2"]
    assert {v["PYTFCOMM_SIZE"] for v in views} == {"3"}
    assert [v["PYTFCOMM_LOCAL_RANK"] for v in views] == ["0", "1", "2"]
    assert {v["PYTFCOMM_LOCAL_SIZE"] for v in views} == {"3"}
    addrs = {v["PYTFCOMM_ADDR"] for v in views}
    assert len(addrs) == 1
    host, port = _cluster.parse_addr(addrs.pop())
    assert host == "127.0.0.1"
    configs = [json.loads(v["TF_CONFIG"]) for v in views]
    workers = configs[0]["cluster"]["worker"]
    assert len(workers) == 3 and all(c["cluster"]["worker"] == workers for c in configs)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": r} for r in range(3)]
    tf_ports = [_cluster.parse_addr(w)[1] for w in workers]
    assert len(set(tf_ports)) == 3 and port not in tf_ports
    secrets_ = {v["PYTFCOMM_SECRET"] for v in views}
    assert len(secrets_) == 1
    secret = secrets_.pop()
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    assert secret.encode() not in res.stdout + res.stderr
    # pytfcomm itself agrees with what the launcher meant (PYTFCOMM_* win over TF_CONFIG).
    for r, v in enumerate(views):
        spec = _cluster.resolve(environ={**v, "PYTFCOMM_HOST_ID": "h"})
        assert (spec.rank, spec.size, spec.source, spec.local_rank, spec.local_size) == (
            r,
            3,
            "PYTFCOMM",
            r,
            3,
        )


@pytest.mark.parametrize(
    ("given", "args", "want"),
    [
        (None, [], "glibc.malloc.hugetlb=1"),
        ("glibc.malloc.arena_max=2", [], "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
        ("glibc.malloc.hugetlb=0", [], "glibc.malloc.hugetlb=0"),  # the user's choice stands
        ("glibc.malloc.arena_max=2", ["--no-malloc-hugepages"], "glibc.malloc.arena_max=2"),
        (None, ["--no-malloc-hugepages"], None),
    ],
)
def test_ranks_get_malloc_hugepages_unless_told_otherwise(
    tmp_path: Path, given: str | None, args: list[str], want: str | None
) -> None:
    env = _env()
    env.pop("GLIBC_TUNABLES", None)
    if given is not None:
        env["GLIBC_TUNABLES"] = given
    res = launch("-np", "2", *args, PY, WORKER, "env", str(tmp_path), cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr.decode()
    assert [v.get("GLIBC_TUNABLES") for v in read_views(tmp_path, 2)] == [want, want]


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unavailable"
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else "unavailable"


ANON_HUGE = """
import ctypes, re
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
n = 64 << 20
p = libc.malloc(n)  # what TF's CPU allocator does for a large tensor
ctypes.memset(p, 1, n)
text = open("/proc/self/smaps_rollup").read()
print("AnonHugePages_kB", re.search(r"AnonHugePages:\\s+(\\d+)", text).group(1))
"""


def test_a_large_malloc_in_a_rank_lands_on_huge_pages(tmp_path: Path) -> None:
    """What the tunable is for: on a machine whose transparent huge pages are
    'madvise' only, a rank's large malloc (TF's tensors) gets huge pages, as NumPy's
    arrays do; with --no-malloc-hugepages it does not."""
    mode = _thp_mode()
    if mode not in ("madvise", "always"):
        pytest.skip(f"transparent huge pages are {mode!r} on this machine")
    kb = {}
    for flag in ([], ["--no-malloc-hugepages"]):
        env = _env()
        env.pop("GLIBC_TUNABLES", None)
        res = launch("-np", "1", *flag, PY, "-c", ANON_HUGE, cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr.decode()
        kb[bool(flag)] = int(res.stdout.decode().split("AnonHugePages_kB")[1].split()[0])
    assert kb[False] >= 32 << 10, kb  # at least half of the 64 MiB
    if mode == "madvise":
        assert kb[True] < 32 << 10, kb


def test_a_given_secret_is_used_and_a_short_one_refused(tmp_path: Path) -> None:
    given = "s" * 40
    res = launch("-np", "2", PY, WORKER, "env", str(tmp_path), cwd=tmp_path,
                 env=_env(PYTFCOMM_SECRET=given))  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert {v["PYTFCOMM_SECRET"] for v in read_views(tmp_path, 2)} == {given}
    res = launch("-np", "2", PY, WORKER, "env", str(tmp_path), cwd=tmp_path,
                 env=_env(PYTFCOMM_SECRET="short"))  # fmt: skip
    assert res.returncode == 2 and b"PYTFCOMM_SECRET is too short" in res.stderr
    # One rule, one error class, one wording: what init() would have said (ConfigError).
    with pytest.raises(ConfigError) as refused:
        plan_mod.job_secret({"PYTFCOMM_SECRET": "short"})
    assert f"error: {refused.value}".encode() in res.stderr, res.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTFCOMM_SECRET", "short")
        with pytest.raises(ConfigError) as joined:
            pytfcomm.init(rank=0, size=1)
    assert str(joined.value) == str(refused.value)


def test_local_host_list_runs_without_ssh(tmp_path: Path) -> None:
    # --ssh-command false: any attempt to use ssh would fail the job.
    res = launch("-H", "localhost:2,127.0.0.1:1", "--ssh-command", "false",
                 PY, WORKER, "env", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    views = read_views(tmp_path, 3)
    assert [(v["PYTFCOMM_RANK"], v["PYTFCOMM_LOCAL_RANK"]) for v in views] == [
        ("0", "0"),
        ("1", "1"),
        ("2", "2"),
    ]
    assert {v["PYTFCOMM_LOCAL_SIZE"] for v in views} == {"3"}


# --------------------------------------------------------------------------- output


def test_every_output_line_carries_its_rank(tmp_path: Path) -> None:
    res = launch("-np", "3", PY, WORKER, "lines", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    out, err = by_rank(res.stdout), by_rank(res.stderr)
    assert sorted(out) == sorted(err) == [0, 1, 2]
    for r in range(3):
        expect = [f"rank {r} line {i} ".encode() + b"x" * (i % 50 + 1) for i in range(200)]
        assert out[r][:200] == expect  # whole lines, in order, never mixed with another rank
        tail = out[r][200:]
        assert tail[0] == b"bin \xff\xfe\x00 end"
        assert b"".join(tail[1:-1]) == b"L" * 70000 and len(tail) > 3  # cut, not lost
        assert tail[-1] == b"no newline at the end"
        assert err[r] == [f"rank {r} err {i} ".encode() + b"y" * (i % 30 + 1) for i in range(200)]


def test_no_prefix_and_output_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    res = launch("-np", "2", "--no-prefix", "--output-dir", str(logs),
                 PY, WORKER, "lines", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert not re.search(rb"^\[\d+\] ", res.stdout, re.MULTILINE)
    assert res.stdout.count(b"rank 1 line 199 ") == 1
    for r in range(2):
        text = (logs / f"rank.{r}.stdout").read_bytes()
        assert text.startswith(f"rank {r} line 0 x\n".encode())
        assert text.endswith(b"no newline at the end")
        assert (logs / f"rank.{r}.stderr").read_bytes().startswith(f"rank {r} err 0 ".encode())


# --------------------------------------------------------------------------- failures


def _pids(tmp_path: Path, n: int) -> list[int]:
    return [int(p) for r in range(n) for p in (tmp_path / f"pid{r}").read_text().split()]


@pytest.mark.parametrize(("how", "code", "words"), [("3", 3, b"exited with code 3"),
                                                    ("kill", 137, b"SIGKILL")])  # fmt: skip
def test_a_failing_rank_stops_the_others(tmp_path: Path, how: str, code: int, words: bytes) -> None:
    t0 = time.monotonic()
    res = launch("-np", "3", "--kill-timeout", "5",
                 PY, WORKER, "fail", str(tmp_path), how, "1", cwd=tmp_path)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode == code, res.stderr.decode()
    assert b"rank 1 " in res.stderr and words in res.stderr
    assert elapsed < 20, f"took {elapsed:.1f} s: the sleeping ranks were not stopped"
    pids = _pids(tmp_path, 3)  # ranks and their grandchildren
    assert wait_gone(pids, timeout=5) == []


def test_a_stopped_rank_is_stopped_at_once(tmp_path: Path) -> None:
    # A SIGSTOPped rank cannot act on SIGTERM until continued: without SIGCONT the
    # launcher would wait out the whole --kill-timeout before its SIGKILL.
    res = launch("-np", "3", "--kill-timeout", "30",
                 PY, WORKER, "stop", str(tmp_path), "3", "0", "1", cwd=tmp_path)  # fmt: skip
    stop_s = time.time() - float((tmp_path / "failed_at").read_text())
    assert res.returncode == 3, res.stderr.decode()
    assert b"rank 0 " in res.stderr and b"exited with code 3" in res.stderr
    assert b"SIGKILL" not in res.stderr, res.stderr.decode()
    assert stop_s < 5, f"stopping took {stop_s:.1f} s: the stopped rank waited for the kill timeout"
    assert wait_gone(_pids(tmp_path, 3), timeout=5) == []


def test_timeout_stops_the_job(tmp_path: Path) -> None:
    res = launch("-np", "2", "--timeout", "1", "--kill-timeout", "2",
                 PY, WORKER, "wait", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 124 and b"--timeout" in res.stderr
    assert wait_gone(_pids(tmp_path, 2), timeout=5) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_forwarded(tmp_path: Path, sig: signal.Signals) -> None:
    with started("-np", "3", PY, WORKER, "wait", str(tmp_path), cwd=tmp_path) as proc:
        wait_files([tmp_path / f"pid{r}" for r in range(3)])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err.decode()
    assert [(tmp_path / f"got{r}").read_text() for r in range(3)] == [str(int(sig))] * 3
    assert wait_gone(_pids(tmp_path, 3), timeout=5) == []


def test_ranks_die_with_the_launcher(tmp_path: Path) -> None:
    with started("-np", "2", PY, WORKER, "wait", str(tmp_path), cwd=tmp_path) as proc:
        wait_files([tmp_path / f"pid{r}" for r in range(2)])
        os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: PR_SET_PDEATHSIG must
        proc.communicate(timeout=30)
    assert wait_gone(_pids(tmp_path, 2), timeout=10) == []


# --------------------------------------------------------------------------- GPUs


def _fake_nvidia_smi(tmp_path: Path, listing: str, code: int = 0) -> dict[str, str]:
    """An environment whose PATH finds a fake ``nvidia-smi`` (and no CUDA_VISIBLE_DEVICES)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    script = f"#!/bin/sh\n[ \"$1\" = -L ] || exit 3\ncat <<'EOF'\n{listing}EOF\nexit {code}\n"
    tool.write_text(script)
    tool.chmod(0o755)
    env = _env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_gpus_per_rank_splits_the_visible_gpus(tmp_path: Path) -> None:
    env = _env(CUDA_VISIBLE_DEVICES="3,5,GPU-a1b2,7,9")
    res = launch("-np", "2", "--gpus-per-rank", "2", PY, WORKER, "env", str(tmp_path),
                 cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    views = read_views(tmp_path, 2)
    assert [v["CUDA_VISIBLE_DEVICES"] for v in views] == ["3,5", "GPU-a1b2,7"]
    assert {v["PYTFCOMM_GPUS_PER_RANK"] for v in views} == {"2"}
    # --gpus wins over the launcher's CUDA_VISIBLE_DEVICES.
    res = launch("-np", "2", "--gpus-per-rank", "1", "--gpus", "6, 4", PY, WORKER, "env",
                 str(tmp_path), cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert [v["CUDA_VISIBLE_DEVICES"] for v in read_views(tmp_path, 2)] == ["6", "4"]


def test_gpus_per_rank_counts_gpus_with_nvidia_smi(tmp_path: Path) -> None:
    listing = (
        "GPU 0: NVIDIA H100 (UUID: GPU-0)\n"
        "GPU 1: NVIDIA H100 (UUID: GPU-1)\n"
        "  MIG 1g.10gb Device 0: (UUID: MIG-x)\n"
        "GPU 2: NVIDIA H100 (UUID: GPU-2)\n"
    )
    env = _fake_nvidia_smi(tmp_path, listing)
    res = launch("-np", "3", "--gpus-per-rank", "1", PY, WORKER, "env", str(tmp_path),
                 cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    assert [v["CUDA_VISIBLE_DEVICES"] for v in read_views(tmp_path, 3)] == ["0", "1", "2"]


def test_without_gpus_per_rank_nothing_changes(tmp_path: Path) -> None:
    res = launch("-np", "2", PY, WORKER, "env", str(tmp_path), cwd=tmp_path,
                 env=_env(CUDA_VISIBLE_DEVICES="0,1"))  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    views = read_views(tmp_path, 2)
    assert [v["CUDA_VISIBLE_DEVICES"] for v in views] == ["0,1", "0,1"]
    assert not any("PYTFCOMM_GPUS_PER_RANK" in v for v in views)


@pytest.mark.parametrize(
    ("args", "gpus", "fragments"),
    [
        (["-np", "3", "--gpus-per-rank", "1"], "0,1",
         ["localhost runs 3 rank(s), which need 3 GPU(s), but 2 are available",
          "CUDA_VISIBLE_DEVICES='0,1'", "--gpus"]),
        (["-np", "2", "--gpus-per-rank", "2"], "0,1,-1,2",
         ["need 4 GPU(s), but 2 are available"]),
        (["-np", "1", "--gpus-per-rank", "1"], "",
         ["need 1 GPU(s), but 0 are available (CUDA_VISIBLE_DEVICES='')"]),
        (["-np", "1", "--gpus-per-rank", "1"], None,
         ["0 are available (no CUDA_VISIBLE_DEVICES and no working nvidia-smi"]),
        (["-np", "2", "--gpus-per-rank", "1", "--gpus", "0,0"], None, ["lists GPU '0' twice"]),
        (["-np", "2", "--gpus-per-rank", "1", "--gpus", "0,,1"], None, ["has an empty entry"]),
        (["-np", "2", "--gpus", "0,1"], "0,1", ["--gpus needs --gpus-per-rank"]),
        (["-np", "2", "--gpus-per-rank", "0"], "0,1", ["must be at least 1"]),
        (["-np", "1", "--gpus-per-rank", "1", "-x", "CUDA_VISIBLE_DEVICES=1"], "0",
         ["-x CUDA_VISIBLE_DEVICES: --gpus-per-rank sets it"]),
    ],
)  # fmt: skip
def test_too_few_gpus_stop_the_launcher_before_any_rank(
    tmp_path: Path, args: list[str], gpus: str | None, fragments: list[str]
) -> None:
    env = _fake_nvidia_smi(tmp_path, "", code=9)  # an nvidia-smi that fails counts nothing
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    res = launch(*args, PY, WORKER, "env", str(tmp_path), cwd=tmp_path, env=env, timeout=30)
    assert res.returncode == 2, res.stderr.decode()
    for fragment in fragments:
        assert fragment.encode() in res.stderr, res.stderr.decode()
    assert not list(tmp_path.glob("rank*.json")), "a rank started"


def test_gpu_lists_and_remote_hosts() -> None:
    assert gpus_mod.parse_gpu_list(" 0, 1 ", "x") == ["0", "1"]
    assert gpus_mod.parse_gpu_list("", "x") == []
    assert gpus_mod.parse_gpu_list("-1", "x") == []
    assert gpus_mod.parse_gpu_list("2,-1,3", "x") == ["2"]
    placed = hosts_mod.place(hosts_mod.parse_host_list("node1:2,node2:2"), None)
    # Every host hands out the same list, block by local rank.
    assert gpus_mod.assign_gpus(placed, 2, ["0", "1", "2", "3"], "test") == [
        "0,1",
        "2,3",
        "0,1",
        "2,3",
    ]
    with pytest.raises(hosts_mod.UsageError, match=r"node1 runs 2 rank\(s\), which need 4"):
        gpus_mod.assign_gpus(placed, 2, ["0", "1", "2"], "test")
    # Remote ranks get theirs on the ssh command line, beside the other rank variables.
    args = launcher_mod.build_parser().parse_args(
        ["-H", "node1:2,node2:2", "--gpus-per-rank", "1", "--gpus", "4,5", "true"]
    )
    specs, _ = launcher_mod._rank_specs(args, ["true"])
    remote = [s.argv[-1] for s in specs]
    assert ["CUDA_VISIBLE_DEVICES=4" in r for r in remote] == [True, False, True, False]
    assert ["CUDA_VISIBLE_DEVICES=5" in r for r in remote] == [False, True, False, True]
    assert all("PYTFCOMM_GPUS_PER_RANK=1" in r for r in remote)


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-np", "0", "true"], "must be at least 1"),
        (["-np", "2"], "command to run is missing"),
        (["-H", "a:b", "true"], "slots 'b' must be a positive integer"),
        (["-H", "node1:0", "true"], "must be a positive integer"),
        (["-H", "fd00::1:2", "true"], "IPv6 address in brackets"),
        (["-H", "bad/host:2", "true"], "is not a host"),
        (["-H", "a:1,a:1", "true"], "listed twice"),
        (["-H", "localhost:2", "-np", "3", "true"], "exceeds the 2 slot(s)"),
        (["--hostfile", "/nonexistent/hosts", "true"], "cannot read it"),
        (["--port", "70000", "true"], "not a port"),
        (["-x", "1BAD", "true"], "NAME or NAME=VALUE"),
        (["--bogus", "true"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = launch(*args, cwd=tmp_path, timeout=30)
    assert res.returncode == 2, res.stderr.decode()
    assert fragment.encode() in res.stderr and b"usage:" in res.stderr
    assert res.stdout == b""


def test_missing_program_exits_127(tmp_path: Path) -> None:
    res = launch("-np", "2", "no-such-program-pytfcomm", cwd=tmp_path, timeout=30)
    assert res.returncode == 127 and b"cannot start rank 0" in res.stderr


# --------------------------------------------------------------------------- ssh


def _ssh_job(tmp_path: Path, *extra: str) -> list[str]:
    port = str(plan_mod._free_ports("127.0.0.1", 1)[0])
    return ["-H", "localhost:1,fakehost:2", "--bind", "127.0.0.1", "--port", port,
            "--ssh-command", FAKE_SSH, *extra]  # fmt: skip


def test_ssh_ranks_get_quoted_args_env_and_secret(tmp_path: Path) -> None:
    log = tmp_path / "ssh.log"
    odd = 'it\'s a "test" $HOME `id` ; * \\'
    env = _env(FAKE_SSH_LOG=str(log), PYTFCOMM_LOG_LEVEL="1", FOO="should not pass",
               GLIBC_TUNABLES="glibc.malloc.arena_max=2")  # fmt: skip
    res = launch(*_ssh_job(tmp_path, "-x", "FOO=x y'z"), PY, WORKER, "env", str(tmp_path), odd,
                 cwd=tmp_path, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    views = read_views(tmp_path, 3)
    secret = views[0]["PYTFCOMM_SECRET"]
    assert {v["PYTFCOMM_SECRET"] for v in views} == {secret}
    for r, v in enumerate(views):
        assert v["argv"][1:] == ["env", str(tmp_path), odd]
        assert v["cwd"] == str(tmp_path)
        assert v["PYTFCOMM_RANK"] == str(r) and v["PYTFCOMM_SIZE"] == "3"
        assert json.loads(v["TF_CONFIG"])["task"]["index"] == r
        assert v["FOO"] == "x y'z"
        assert v["PYTFCOMM_LOG_LEVEL"] == "1"
    # This machine's GLIBC_TUNABLES stays here; remote ranks get only the huge pages.
    assert [v["GLIBC_TUNABLES"] for v in views] == [
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1",
        "glibc.malloc.hugetlb=1",
        "glibc.malloc.hugetlb=1",
    ]
    assert [(v["PYTFCOMM_LOCAL_RANK"], v["PYTFCOMM_LOCAL_SIZE"]) for v in views] == [
        ("0", "1"),
        ("0", "2"),
        ("1", "2"),
    ]
    ssh_log = log.read_text()
    assert ssh_log.count("host=fakehost\n") == 2 and ssh_log.count("argc=1\n") == 2
    assert secret not in ssh_log and secret.encode() not in res.stdout + res.stderr


def test_ssh_ranks_reduce_and_are_stopped_on_failure(tmp_path: Path) -> None:
    res = launch(*_ssh_job(tmp_path), PY, WORKER, "allreduce", str(tmp_path), "a b",
                 cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    got = {r: json.loads(lines[0]) for r, lines in by_rank(res.stdout).items()}
    assert got == {r: {"rank": r, "sum": [6.0] * 4, "argv": ["a b"]} for r in range(3)}
    # rank 0 (local) fails while the ssh ranks sleep: their watchdog must stop them.
    res = launch(*_ssh_job(tmp_path, "--kill-timeout", "3"),
                 PY, WORKER, "fail", str(tmp_path), "4", "0", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 4, res.stderr.decode()
    assert wait_gone(_pids(tmp_path, 3), timeout=10) == []


def test_a_stopped_ssh_rank_is_stopped_at_once(tmp_path: Path) -> None:
    # Rank 1 (over ssh) stops itself in a process group of its own, out of reach of
    # anything the launcher sends the ssh client: only the remote wrapper can wake it.
    res = launch(*_ssh_job(tmp_path, "--kill-timeout", "30"),
                 PY, WORKER, "stop", str(tmp_path), "4", "0", "1", "own-group",
                 cwd=tmp_path)  # fmt: skip
    stop_s = time.time() - float((tmp_path / "failed_at").read_text())
    assert res.returncode == 4, res.stderr.decode()
    assert b"SIGKILL" not in res.stderr, res.stderr.decode()
    assert stop_s < 5, f"stopping took {stop_s:.1f} s: the stopped ssh rank waited for the kill"
    assert wait_gone(_pids(tmp_path, 3), timeout=5) == []


def test_remote_command_survives_the_shell() -> None:
    argv = ["prog", "a b", "it's", '"q"', "$X", "`x`", "\\", ""]
    cmd = remote_command(argv, {"A": "1 2", "B": "it's"}, "/a dir", grace=3)
    words = shlex.split(cmd)
    assert words[:3] == ["cd", "/a dir", "&&"]
    assert words[5:7] == ["A=1 2", "B=it's"]
    assert words[-len(argv) :] == argv
    with pytest.raises(AssertionError):
        remote_command(argv, {"PYTFCOMM_SECRET": "x" * 20}, "/", grace=3)


# --------------------------------------------------------------------------- end to end


def test_allreduce_end_to_end(tmp_path: Path) -> None:
    script = (
        "import pytfcomm, numpy as np; c = pytfcomm.init(); "
        "print(c.allreduce(np.ones(4)*(c.rank+1)))"
    )
    res = launch("-np", "2", PY, "-c", script, cwd=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert sorted(res.stdout.decode().splitlines()) == ["[0] [3. 3. 3. 3.]", "[1] [3. 3. 3. 3.]"]


def test_module_entry_point_and_no_tensorflow(tmp_path: Path) -> None:
    code = "import sys, pytfcomm.launcher; print('tensorflow' in sys.modules)"
    res = subprocess.run([PY, "-c", code], cwd=tmp_path, capture_output=True, timeout=60)
    assert res.stdout == b"False\n", res.stderr.decode()
    res = subprocess.run([PY, "-m", "pytfcomm.launcher", "-np", "2", PY, "-c", "print('hi')"],
                         cwd=tmp_path, capture_output=True, timeout=60, env=_env())  # fmt: skip
    assert res.returncode == 0 and sorted(res.stdout.splitlines()) == [b"[0] hi", b"[1] hi"]


# --------------------------------------------------------------------------- units


def test_host_parsing_and_placement(tmp_path: Path) -> None:
    hosts = hosts_mod.parse_host_list("localhost:2,user@node7:3,[2001:db8::5]")
    assert [(h.target, h.name, h.slots, h.local) for h in hosts] == [
        ("localhost", "localhost", 2, True),
        ("user@node7", "node7", 3, False),
        ("2001:db8::5", "2001:db8::5", 1, False),
    ]
    placed = hosts_mod.place(hosts, 4)
    assert [(p.host.name, p.local_rank, p.local_size) for p in placed] == [
        ("localhost", 0, 2),
        ("localhost", 1, 2),
        ("node7", 0, 2),
        ("node7", 1, 2),
    ]
    assert len(hosts_mod.place(hosts, None)) == 6
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=4\n\nnode2:2  # comment\nnode3\n")
    assert [(h.name, h.slots) for h in hosts_mod.parse_hostfile(str(hostfile))] == [
        ("node1", 4),
        ("node2", 2),
        ("node3", 1),
    ]
    hostfile.write_text("node1 cpus=4\n")
    with pytest.raises(hosts_mod.UsageError, match="hosts:1: unexpected 'cpus=4'"):
        hosts_mod.parse_hostfile(str(hostfile))


def test_remote_ports_never_collide() -> None:
    placed = hosts_mod.place(hosts_mod.parse_host_list("node1:2,node2:2"), None)
    plan = plan_mod.make_plan(placed, port=29500, bind=None)
    assert plan.addr == "node1:29500"
    assert plan.tf_workers == ["node1:29501", "node1:29502", "node2:29501", "node2:29502"]
    with pytest.raises(hosts_mod.UsageError, match=r"must lie in 1\.\.65535"):
        plan_mod.make_plan(placed, port=65534, bind=None)


def test_cluster_reads_local_rank_and_size() -> None:
    base = {"PYTFCOMM_RANK": "1", "PYTFCOMM_SIZE": "4", "PYTFCOMM_ADDR": "127.0.0.1:5"}
    spec = _cluster.resolve(
        environ={**base, "PYTFCOMM_LOCAL_RANK": "1", "PYTFCOMM_LOCAL_SIZE": "2"}
    )
    assert (spec.local_rank, spec.local_size) == (1, 2)
    assert _cluster.resolve(environ=base).local_rank is None
    for bad in (
        {"PYTFCOMM_LOCAL_SIZE": "5"},
        {"PYTFCOMM_LOCAL_RANK": "2", "PYTFCOMM_LOCAL_SIZE": "2"},
    ):
        with pytest.raises(_cluster.ConfigError, match="PYTFCOMM_LOCAL_"):
            _cluster.resolve(environ={**base, **bad})
