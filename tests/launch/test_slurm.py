"""``srun`` on a real Slurm cluster that the test starts itself (issue 13).

Each cluster is one node, run by Debian's slurm-wlm (munged, slurmctld, slurmd) inside a
network namespace that the test creates, so its ports and addresses exist nowhere else.
Its daemons and clients also see their own /etc/hosts (bind-mounted in a private mount
namespace; ``ip netns exec`` would do that too, but remounts /sys without the cgroup
filesystems that slurmd insists on), which gives the node a name of our choosing:

* ``ptc-local`` -> 127.0.1.1, as Debian's /etc/hosts maps a machine's own name: a
  one-node cluster, where ``srun -n 3 python train.py`` must run without a launcher and
  without a job secret (every address is loopback);
* ``ptc-node`` -> 10.232.0.1 (the namespace's non-loopback address, on its lo): what a
  node of a multi-node cluster looks like, where the job needs its secret, given in the
  batch script or by PYTFCOMM_SECRET_FILE (docs/launching.md).

Skipped, with the reason, where Slurm cannot start: not root, packages missing
(``apt-get install slurm-wlm munge``; scripts/setup.sh does it as root), no network
namespaces, or a daemon that does not come up. Every step is bounded in time; teardown
stops the daemons, kills whatever is left in the namespace and removes all state, so
the tests pass again right after.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _netns import ip
from _paths import WORKERS

WORKER = str(WORKERS / "slurm_worker.py")
PY = sys.executable
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "sbatch", "ip", "nsenter", "unshare")
START_S = 45  # munged + slurmctld + slurmd until the node is idle
RUN_S = 60  # one srun / sbatch --wait
MACHINE_ADDR = "10.232.0.1"  # the namespace's one non-loopback address
pytestmark = pytest.mark.timeout(180)

_LAUNCHER_VARS = ("PYTFCOMM_", "SLURM_", "TF_CONFIG", "OMPI_", "PMI", "MPI_LOCAL", "I_MPI_")

_CONF = """\
ClusterName=ptctest
SlurmctldHost={ctld_host}(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
PlugStackConfig={dir}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName={node} NodeAddr={addr} CPUs=4 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmCluster:
    """A one-node Slurm cluster in a network namespace of its own (see module doc)."""

    def __init__(self, node: str, addr: str) -> None:
        self.node, self.addr = node, addr
        self.tag = uuid.uuid4().hex[:8]
        self.ns = f"ptc-slurm-{self.tag}"
        self.dir = Path(tempfile.mkdtemp(prefix="pytfcomm-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.hosts = self.dir / "hosts"  # the cluster's /etc/hosts
        self.bin: dict[str, str | None] = {}
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.ns_created = False

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        if os.geteuid() != 0:
            pytest.skip(f"starting slurmd and a network namespace needs root (uid {os.geteuid()})")
        search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        self.bin = {b: shutil.which(b, path=search) for b in BINARIES}
        missing = [b for b, path in self.bin.items() if path is None]
        if missing:
            pytest.skip(
                f"Slurm cannot start: {', '.join(missing)} not installed (apt-get install "
                "slurm-wlm munge iproute2; scripts/setup.sh does it as root)"
            )
        self._netns()
        self._files()
        deadline = time.monotonic() + START_S
        munge = self.dir / "munge"
        self._spawn("munged", self.bin["munged"], "-F", "-f", f"--socket={munge}/munge.socket",
                    f"--key-file={munge}/munge.key", f"--log-file={self.dir}/log/munged.log",
                    f"--pid-file={munge}/munged.pid",
                    f"--seed-file={munge}/munged.seed")  # fmt: skip
        self._wait_for(lambda: (munge / "munge.socket").exists(), deadline, "munged")
        self._spawn("slurmctld", self.bin["slurmctld"], "-D", "-i", "-f", str(self.conf))
        self._spawn("slurmd", self.bin["slurmd"], "-D", "-N", self.node, "-f", str(self.conf))
        self._wait_for(self._node_idle, deadline, f"node {self.node} idle in sinfo")

    def _netns(self) -> None:
        r = ip("netns", "add", self.ns)
        if r.returncode != 0:
            pytest.skip(f"`ip netns add` failed here: {r.stderr.strip()}")
        self.ns_created = True
        # A non-loopback address besides the node's: getaddrinfo(AI_ADDRCONFIG), which
        # slurmctld uses to listen, finds no IPv4 at all on a machine with loopback only.
        steps = [("-n", self.ns, "link", "set", "lo", "up"),
                 ("-n", self.ns, "addr", "add", f"{MACHINE_ADDR}/32", "dev", "lo")]  # fmt: skip
        if not self.addr.startswith("127.") and self.addr != MACHINE_ADDR:
            steps.append(("-n", self.ns, "addr", "add", f"{self.addr}/32", "dev", "lo"))
        for step in steps:
            r = ip(*step)
            if r.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {r.stderr.strip()}")
        # This machine's name (slurmctld checks it) and the node's.
        self.hosts.write_text(
            f"127.0.0.1 localhost {socket.gethostname()}\n::1 localhost\n{self.addr} {self.node}\n"
        )

    def _files(self) -> None:
        self.dir.chmod(0o755)  # munged wants a socket directory all may traverse
        for sub in ("munge", "state", "spool", "log"):
            (self.dir / sub).mkdir()
        (self.dir / "munge").chmod(0o755)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.dir / "plugstack.conf").write_text("")
        ctld_host = socket.gethostname().split(".", 1)[0]
        self.conf.write_text(
            _CONF.format(ctld_host=ctld_host, dir=self.dir, node=self.node, addr=self.addr)
        )

    def inside(self, *argv: str) -> list[str]:
        """``argv`` run in the cluster's network namespace, with the cluster's /etc/hosts."""
        bind = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{self.ns}", "unshare", "--mount",
                "--propagation", "private", "sh", "-c", bind, str(self.hosts), *argv]  # fmt: skip

    def _spawn(self, name: str, *argv: str) -> None:
        with open(self.dir / "log" / f"{name}.out", "wb") as out:
            self.daemons[name] = subprocess.Popen(
                self.inside(*argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.dir,
                start_new_session=True,
            )

    def _wait_for(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while not ready():
            for name, p in self.daemons.items():
                if p.poll() is not None:
                    pytest.skip(
                        f"Slurm could not start here: {name} exited with code {p.returncode} "
                        f"({_tail(self.dir / 'log' / f'{name}.out')})"
                    )
            if time.monotonic() > deadline:
                logs = "; ".join(
                    f"{n}: {_tail(self.dir / 'log' / f'{n}.out', 3)}" for n in self.daemons
                )
                pytest.skip(f"Slurm could not start here: no {what} after {START_S} s ({logs})")
            time.sleep(0.2)

    def _node_idle(self) -> bool:
        try:
            r = self.run(["sinfo", "-h", "-n", self.node, "-o", "%t"], timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0 and r.stdout.strip() == "idle"

    # ------------------------------------------------------------------ use
    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment (no launcher variables of ours) pointing at this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_VARS)}
        env.update(
            SLURM_CONF=str(self.conf),
            PYTFCOMM_CONNECT_TIMEOUT="30",
            PYTFCOMM_TIMEOUT="60",
            **extra,
        )
        return env

    def run(
        self, argv: list[str], *, timeout: float = RUN_S, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (srun, sbatch, sinfo) in the cluster's namespace."""
        return subprocess.run(
            self.inside(*argv),
            env=self.env(**env),
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    # ------------------------------------------------------------------ stop
    def stop(self) -> list[str]:
        """Stop everything and remove all state; returns what would not go."""
        problems: list[str] = []
        for name in ("slurmd", "slurmctld", "munged"):  # clients before their servers
            p = self.daemons.get(name)
            if p is None:
                continue
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                problems.append(f"{name} ignored SIGTERM for 15 s")
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        if self.ns_created:
            # Job steps and tasks left behind (a failed test) live in the namespace too.
            r = ip("netns", "pids", self.ns)
            for pid in (int(p) for p in r.stdout.split()):
                problems.append(f"pid {pid} still ran in the namespace")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            ip("netns", "del", self.ns)
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems


def _cluster(node: str, addr: str) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(node, addr)
    try:
        cluster.start()
        yield cluster
    finally:
        problems = cluster.stop()
    assert not problems, f"Slurm teardown: {problems}"


@pytest.fixture
def one_node() -> Iterator[SlurmCluster]:
    """A one-node cluster whose node name resolves to 127.0.1.1."""
    yield from _cluster("ptc-local", "127.0.1.1")


@pytest.fixture(scope="module")
def remote_node() -> Iterator[SlurmCluster]:
    """A cluster whose node name resolves to a non-loopback address, as on a real cluster."""
    yield from _cluster("ptc-node", MACHINE_ADDR)


def _tasks(stdout: str) -> list[dict]:
    """One JSON line per task, in rank order (errors first)."""
    views = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return sorted(views, key=lambda v: v.get("rank", -1))


def _check_job(views: list[dict], loopback: bool, node: str) -> None:
    assert [v.get("rank") for v in views] == [0, 1, 2], views
    for v in views:
        assert (v["size"], v["source"], v["all_loopback"]) == (3, "slurm", loopback), v
        assert v["addr"].startswith(f"{node}:"), v
        assert v["sum"] == [6, 6, 6, 6], v


# --------------------------------------------------------------------------- one node


def test_srun_on_one_node_needs_no_launcher_and_no_secret(one_node: SlurmCluster) -> None:
    res = one_node.run(["srun", "-n", "3", PY, WORKER])
    assert res.returncode == 0, res.stdout + res.stderr
    _check_job(_tasks(res.stdout), loopback=True, node=one_node.node)


def test_srun_step_gives_tasks_per_node_and_its_job(one_node: SlurmCluster) -> None:
    # On one node, -m cyclic with 2 tasks: SLURM_STEP_TASKS_PER_NODE=2 is the local size.
    res = one_node.run(["srun", "-n", "2", "-m", "cyclic", PY, WORKER])
    assert res.returncode == 0, res.stdout + res.stderr
    views = _tasks(res.stdout)
    assert [(v.get("rank"), v.get("local_size")) for v in views] == [(0, 2), (1, 2)], views
    jobs = {v["job"] for v in views}
    assert len(jobs) == 1 and jobs.pop().startswith("SLURM_JOB_ID="), views


# --------------------------------------------------------------------------- multi-node style


def test_srun_across_addresses_needs_a_secret(remote_node: SlurmCluster) -> None:
    res = remote_node.run(["srun", "-n", "3", PY, WORKER])
    assert res.returncode != 0, res.stdout
    views = _tasks(res.stdout)
    assert len(views) == 3 and {v.get("error") for v in views} == {"ConfigError"}, views
    message = views[0]["message"]
    for words in ("no job secret", "export PYTFCOMM_SECRET=", "PYTFCOMM_SECRET_FILE"):
        assert words in message, message


def test_batch_script_exports_the_secret(remote_node: SlurmCluster) -> None:
    out = remote_node.dir / "batch.out"
    script = remote_node.dir / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        "#SBATCH -n 3\n"
        f"export PYTFCOMM_SECRET=$({PY} -c 'import secrets; print(secrets.token_hex(32))')\n"
        f"srun {PY} {WORKER}\n"
    )
    res = remote_node.run(["sbatch", "--wait", "-o", str(out), str(script)])
    text = out.read_text(errors="replace") if out.exists() else "(no output file)"
    assert res.returncode == 0, res.stdout + res.stderr + text
    _check_job(_tasks(text), loopback=False, node=remote_node.node)


def test_secret_file_on_a_shared_filesystem(remote_node: SlurmCluster) -> None:
    secret = remote_node.dir / "job.secret"
    secret.write_text(uuid.uuid4().hex * 2 + "\n")
    secret.chmod(0o600)
    res = remote_node.run(["srun", "-n", "3", PY, WORKER], PYTFCOMM_SECRET_FILE=str(secret))
    assert res.returncode == 0, res.stdout + res.stderr
    _check_job(_tasks(res.stdout), loopback=False, node=remote_node.node)
    secret.chmod(0o644)
    res = remote_node.run(["srun", "-n", "3", PY, WORKER], PYTFCOMM_SECRET_FILE=str(secret))
    views = _tasks(res.stdout)
    assert res.returncode != 0 and len(views) == 3, res.stdout + res.stderr
    assert all("chmod 600" in v.get("message", "") for v in views), views
