"""``pytfcomm-run``: start the ranks of a pytfcomm job (``python -m pytfcomm.launcher``).

::

    pytfcomm-run -np 4 python train.py --epochs 3          # 4 ranks on this machine
    pytfcomm-run -H node1:4,node2:4 python train.py        # 8 ranks, node2's over ssh
    pytfcomm-run -np 4 --gpus-per-rank 1 python train.py   # rank r sees only GPU r

Every rank gets PYTFCOMM_RANK/SIZE/ADDR/LOCAL_RANK/LOCAL_SIZE, TF_CONFIG, Horovod's
HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE and the job
secret PYTFCOMM_SECRET; its output lines are prefixed with ``[rank] ``. When a rank fails
the others are stopped and the launcher exits with that rank's code, or with
``--restarts N`` starts every rank again, up to N times (``PYTFCOMM_RESTART_COUNT`` tells
the ranks which run they are in). With ``--elastic`` the others go on in place instead,
as long as ``--min-np`` of them are left (``_launch/membership.py``, docs/elastic.md),
and with ``--host-discovery-script`` new ranks join at commit points
(``_launch/discovery.py``).
``--gpus-per-rank N`` sets each rank's CUDA_VISIBLE_DEVICES to its N GPUs
(``_launch/gpus.py``). Local ranks are bound to their share of this machine's cores
unless ``--bind-to none`` (``_launch/binding.py``).
Under ``srun`` or ``mpirun`` no launcher is needed: ``pytfcomm.init()`` reads their
variables.
docs/launching.md describes every option; docs/security.md the secret.

This module imports neither TensorFlow nor anything that needs it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence

from ._cluster import format_addr, is_loopback_host
from ._elastic_wire import ADDR_VAR, GROW_VAR, ID_VAR, JOINER_VAR, WINDOW_VAR
from ._launch.binding import BIND_CHOICES, cpu_list, local_bindings
from ._launch.discovery import PERIOD_S, SCRIPT_TIMEOUT_S, HostDiscovery
from ._launch.gpus import GPUS_PER_RANK_VAR, assign_gpus, visible_gpus
from ._launch.hosts import (
    Host,
    Placement,
    UsageError,
    is_local_host,
    parse_host_list,
    parse_hostfile,
    place,
)
from ._launch.membership import MembershipService
from ._launch.output import OutputRelay
from ._launch.plan import (
    DEFAULT_PORT,
    forwarded_vars,
    job_secret,
    launcher_host,
    local_env,
    make_plan,
    malloc_hugepages,
    remote_passthrough,
)
from ._launch.ports import free_port
from ._launch.procs import RankSpec
from ._launch.remote import DEFAULT_SSH, ssh_argv
from ._launch.restart import run_with_restarts
from .errors import ConfigError

__all__ = ["build_parser", "main"]

PROG = "pytfcomm-run"
USAGE_EXIT = 2


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port in 1..65535")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``pytfcomm-run``."""
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [-np N] [-H HOST:SLOTS,... | --hostfile FILE] [options] command [args...]",
        description="Start the ranks of a pytfcomm job and supervise them.",
        epilog="Exit code: 0 when every rank succeeds; otherwise the first failing rank's code "
        "(128+N if killed by signal N; with --restarts, of the last run), 128+N when the "
        "launcher got signal N, 124 on --timeout, 2 for bad arguments. "
        "See docs/launching.md.",
        allow_abbrev=False,
    )
    p.add_argument(
        "-np",
        "-n",
        "--np",
        dest="np",
        type=_positive_int,
        metavar="N",
        help="number of ranks (default: every slot of -H/--hostfile, else 1)",
    )
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument(
        "-H",
        "--hosts",
        metavar="HOST[:SLOTS],...",
        help="hosts and their slots, e.g. node1:4,node2:4 (default localhost)",
    )
    hosts.add_argument(
        "--hostfile", metavar="FILE", help="one host per line: 'host slots=N' or 'host:N'"
    )
    p.add_argument(
        "--port",
        type=_port,
        metavar="PORT",
        help="pytfcomm rendezvous port on rank 0's host; TensorFlow's are "
        "PORT+1+local_rank (default: free ports for a local job, 29500 otherwise)",
    )
    p.add_argument(
        "--bind",
        metavar="ADDR",
        help="this machine's address as the other hosts see it (multi-host jobs; "
        "default: the address routing to the first remote host)",
    )
    p.add_argument(
        "--ssh-command",
        metavar="CMD",
        help=f"ssh client and options (default $PYTFCOMM_RUN_SSH or '{DEFAULT_SSH}')",
    )
    p.add_argument(
        "-x",
        dest="export",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="also set this variable on remote ranks (repeatable)",
    )
    p.add_argument(
        "--gpus-per-rank",
        type=_positive_int,
        metavar="N",
        help="give each rank N GPUs of its host: CUDA_VISIBLE_DEVICES of local rank r is "
        "GPUs r*N..r*N+N-1 (of --gpus, else this CUDA_VISIBLE_DEVICES, else nvidia-smi -L); "
        "an error before anything starts when a host has too few",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="with --gpus-per-rank: the GPUs every host hands out, e.g. 0,1,2,3 or GPU "
        "UUIDs (default: this machine's CUDA_VISIBLE_DEVICES, else all nvidia-smi -L lists)",
    )
    p.add_argument(
        "--no-malloc-hugepages",
        action="store_true",
        help="leave GLIBC_TUNABLES as it is; by default ranks get glibc.malloc.hugetlb=1 "
        "(malloc asks for transparent huge pages: TF's large tensors then all-reduce as "
        "fast as NumPy's) unless GLIBC_TUNABLES already sets it",
    )
    p.add_argument(
        "--bind-to",
        choices=BIND_CHOICES,
        default="core",
        help="core (default): bind each rank on this machine to its share of the cores this "
        "launcher may use (whole cores each; with more ranks than cores, local rank r on "
        "core r mod cores); none: ranks run wherever the scheduler puts them. Ranks on "
        "remote hosts are not bound",
    )
    p.add_argument("--no-prefix", action="store_true", help="relay output without '[rank] '")
    p.add_argument(
        "--output-dir",
        metavar="DIR",
        help="also write rank.<r>.stdout / rank.<r>.stderr there (unprefixed)",
    )
    p.add_argument(
        "--kill-timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="grace between SIGTERM and SIGKILL when stopping ranks (default 10)",
    )
    p.add_argument(
        "--timeout", type=_seconds, metavar="S", help="stop the job after S seconds and exit 124"
    )
    p.add_argument(
        "--restarts",
        type=_count,
        default=0,
        metavar="N",
        help="when a rank fails, stop the job and start every rank again, up to N times; "
        "ranks get PYTFCOMM_RESTART_COUNT (0 on the first run) (default 0)",
    )
    p.add_argument(
        "--elastic",
        action="store_true",
        help="when a rank is lost, the others go on in place with new ranks (pytfcomm.elastic,"
        " hvd.elastic.run) instead of stopping; --restarts is the fallback when fewer than "
        "--min-np are left (docs/elastic.md)",
    )
    p.add_argument(
        "--min-np",
        type=_positive_int,
        metavar="A",
        help="with --elastic: the fewest ranks the job goes on with (default 1)",
    )
    p.add_argument(
        "--elastic-window",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="with --elastic: how long the launcher waits for every running rank to check "
        "in after a loss before it leaves out those that did not (default 10)",
    )
    p.add_argument(
        "--max-np",
        type=_positive_int,
        metavar="B",
        help="with --elastic and --host-discovery-script: the most ranks the job grows to",
    )
    p.add_argument(
        "--host-discovery-script",
        metavar="PATH",
        help="with --elastic and --max-np: an executable printing 'host:slots' (or 'host', "
        f"1 slot) lines, run every {PERIOD_S:g} s (at most {SCRIPT_TIMEOUT_S:g} s each); "
        "while the slots (capped by --max-np) exceed the running ranks, new ranks start "
        "where slots are free (other hosts over ssh) and join at the next commit point "
        "(pytfcomm.elastic.hosts_updated, hvd.elastic). Other hosts need --bind or a remote "
        "host in -H; -np defaults to --min-np (docs/elastic.md)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print where each rank runs and its ports (never the secret)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs")
    return p


def _hosts(args: argparse.Namespace) -> list[Host]:
    if args.hosts is not None:
        return parse_host_list(args.hosts)
    if args.hostfile is not None:
        return parse_hostfile(args.hostfile)
    return [Host("localhost", "localhost", args.np or 1, local=True)]


def _check_bind(bind: str | None) -> None:
    if bind is not None and not is_local_host(bind):
        raise UsageError(f"--bind {bind!r} is not an address of this machine.")


def _gpu_envs(
    args: argparse.Namespace, placements: list[Placement], exported: dict[str, str]
) -> list[dict[str, str]]:
    """Each rank's GPU variables (``--gpus-per-rank``), or empty dicts without it."""
    if args.gpus_per_rank is None:
        if args.gpus is not None:
            raise UsageError("--gpus needs --gpus-per-rank N (how many GPUs each rank gets).")
        return [{} for _ in placements]
    if "CUDA_VISIBLE_DEVICES" in exported:
        raise UsageError("-x CUDA_VISIBLE_DEVICES: --gpus-per-rank sets it per rank (use --gpus).")
    gpus, source = visible_gpus(args.gpus, os.environ)
    lists = assign_gpus(placements, args.gpus_per_rank, gpus, source)
    per_rank = str(args.gpus_per_rank)
    return [{"CUDA_VISIBLE_DEVICES": g, GPUS_PER_RANK_VAR: per_rank} for g in lists]


def _check_grow(args: argparse.Namespace, started: int) -> str | None:
    """``--max-np`` and ``--host-discovery-script``, checked (UsageError); the script's
    absolute path, or None when the job does not grow."""
    script, max_np = getattr(args, "host_discovery_script", None), getattr(args, "max_np", None)
    if script is None and max_np is None:
        return None
    if not getattr(args, "elastic", False):
        raise UsageError(f"{'--max-np' if script is None else '--host-discovery-script'} "
                         "needs --elastic.")  # fmt: skip
    if script is None:
        raise UsageError(
            "--max-np needs --host-discovery-script PATH, which tells the launcher when "
            "to add ranks (docs/elastic.md)."
        )
    if max_np is None:
        raise UsageError("--host-discovery-script needs --max-np B, the most ranks to grow to.")
    min_np = args.min_np or 1
    if max_np < min_np:
        raise UsageError(f"--max-np {max_np} is less than --min-np {min_np}.")
    if max_np < started:
        raise UsageError(f"--max-np {max_np} is less than the {started} rank(s) started (-np).")
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise UsageError(f"--host-discovery-script {script!r}: no such file.")
    if not os.access(path, os.X_OK):
        raise UsageError(
            f"--host-discovery-script {script!r} is not executable: chmod +x it (it "
            "prints 'host:slots' lines)."
        )
    if args.gpus_per_rank is not None:
        raise UsageError("--host-discovery-script: joiners get no GPUs; leave out --gpus-per-rank.")
    return path


def _membership(
    args: argparse.Namespace,
    placements: list[Placement],
    secret: str,
    attempt: int,
    make_joiner: Callable[[int, Host], RankSpec],
) -> dict[str, str]:
    """With ``--elastic``: start run ``attempt``'s membership service (closing the last
    run's) and, with ``--host-discovery-script``, the discovery (once); the variables
    every rank gets for it. Nothing without ``--elastic``.

    The service listens on this machine's address as the job's hosts see it (loopback
    for a local job without ``--bind``); after a re-forming the new rendezvous is a
    fresh port there when the new rank 0 runs here, else the job's port (``--port``,
    default 29500) on the new rank 0's host."""
    script = _check_grow(args, len(placements))
    if not getattr(args, "elastic", False):
        if getattr(args, "min_np", None) is not None:
            raise UsageError("--min-np needs --elastic.")
        return {}
    min_np = args.min_np or 1
    if min_np > len(placements):
        raise UsageError(f"--min-np {min_np} is more than the {len(placements)} rank(s) started.")
    for old in args.memberships.values():
        old.close()
    here = launcher_host(placements, args.bind)
    if script is not None and args.discovery is None:
        remote_ok = not is_loopback_host(here)
        args.discovery = HostDiscovery(
            script, max_np=args.max_np, say=args.say, remote_ok=remote_ok
        )
        args.discovery.start()
    port = DEFAULT_PORT if args.port is None else args.port

    def rendezvous(host: Host) -> str:
        """The new communicator's address, its rank 0 running on ``host``."""
        return format_addr(here, free_port(here)) if host.local else format_addr(host.name, port)

    service = MembershipService(
        here,
        secret,
        [p.rank for p in placements],
        min_np=min_np,
        window=args.elastic_window,
        say=args.say,
        grow=args.discovery,
        make_joiner=make_joiner,
        max_np=args.max_np or 0,
        where={p.rank: p.host for p in placements},
        rendezvous=rendezvous,
    )
    args.memberships[attempt] = service
    grow = {GROW_VAR: "1"} if args.discovery is not None else {}
    return {ADDR_VAR: service.addr, WINDOW_VAR: f"{args.elastic_window:g}", **grow}


def _rank_specs(
    args: argparse.Namespace, command: list[str], attempt: int = 0
) -> tuple[list[RankSpec], str]:
    """Every rank's spec for run ``attempt`` (0, then 1.. on restarts): a new plan each
    time, so fresh ports when the launcher picks them and a fresh secret unless given."""
    _check_bind(args.bind)
    placements = place(_hosts(args), args.np)
    plan = make_plan(placements, port=args.port, bind=args.bind)
    secret = job_secret(os.environ)
    runs = {"PYTFCOMM_RESTART_COUNT": str(attempt), "PYTFCOMM_MAX_RESTARTS": str(args.restarts)}
    if getattr(args, "elastic_dir", None):
        runs["PYTFCOMM_ELASTIC_DIR"] = args.elastic_dir
    exported = forwarded_vars(args.export, os.environ)
    # Local ranks inherit this GLIBC_TUNABLES; remote ones only what -x exports.
    hugepages = not args.no_malloc_hugepages
    local_hp = malloc_hugepages({**os.environ, **exported}) if hugepages else {}
    remote_hp = malloc_hugepages(exported) if hugepages else {}
    gpu_envs = _gpu_envs(args, placements, exported)
    base = {**local_env(os.environ), **exported}

    passthrough = {**remote_passthrough(os.environ), **exported}

    def remote(target: str, env: dict[str, str]) -> tuple[list[str], bytes]:
        """ssh's argv for a rank on ``target`` and its stdin line (the secret)."""
        argv = ssh_argv(args.ssh_command, target, command, {**passthrough, **env, **remote_hp},
                        args.kill_timeout)  # fmt: skip
        return argv, (secret + "\n").encode()

    def make_joiner(worker: int, host: Host) -> RankSpec:
        """A rank started to join the running job (``_launch/membership.py``) on
        ``host``: no rank, size or address of its own until it is admitted; not bound
        to cores; over ssh on another host, as the ranks there."""
        joiner = {**runs, JOINER_VAR: "1", ID_VAR: str(worker)}
        if host.local:
            env = {**base, **local_hp, **joiner, "PYTFCOMM_SECRET": secret}
            return RankSpec(worker, "localhost", command, env)
        argv, line = remote(host.target, joiner)
        return RankSpec(worker, host.target, argv, dict(os.environ), line)

    runs.update(_membership(args, placements, secret, attempt, make_joiner))
    local_size = next((p.local_size for p in placements if p.host.local), 0)
    cpus = local_bindings(local_size) if args.bind_to == "core" and local_size else []
    specs = []
    for p, rank_env, gpu_env in zip(plan.placements, plan.envs, gpu_envs, strict=True):
        env = {**rank_env, **runs, **gpu_env}
        if args.elastic:
            env[ID_VAR] = str(p.rank)
        if p.host.local:
            full = {**base, **env, **local_hp, "PYTFCOMM_SECRET": secret}
            bound = cpus[p.local_rank] if cpus else None
            specs.append(RankSpec(p.rank, p.host.target, command, full, cpus=bound))
        else:
            argv, line = remote(p.host.target, env)
            specs.append(RankSpec(p.rank, p.host.target, argv, dict(os.environ), line))
    summary = f"{len(placements)} rank(s), rendezvous {plan.addr}, TF workers {plan.tf_workers}"
    return specs, summary


def _drop_elastic_dir(args: argparse.Namespace) -> None:
    """The launcher's leftovers: its hvd.elastic directory and membership services."""
    if getattr(args, "discovery", None) is not None:
        args.discovery.close()
    for service in getattr(args, "memberships", {}).values():
        service.close()
    if args.elastic_dir and args.own_elastic_dir:
        shutil.rmtree(args.elastic_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pytfcomm-run`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("the command to run is missing, e.g. pytfcomm-run -np 2 python train.py")
    if command[0].startswith("-"):
        parser.error(f"unknown option {command[0]!r} (options go before the command)")

    def say(message: str) -> None:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    args.say = say
    args.memberships = {}
    args.discovery = None
    grows = args.elastic and args.host_discovery_script is not None
    if grows and args.np is None and args.hosts is None and args.hostfile is None:
        args.np = args.min_np or 1  # as horovodrun: an elastic job starts with --min-np

    def specs_for(attempt: int) -> list[RankSpec]:
        specs, summary = _rank_specs(args, command, attempt)
        if args.verbose:
            say(summary)
            for s in specs:
                where = "local" if s.stdin_line is None else "ssh"
                if s.cpus is not None:
                    where += f", cpus {cpu_list(s.cpus)}"
                say(f"rank {s.rank} on {s.host} ({where}): {shlex.join(s.argv)[:300]}")
        return specs

    # Where hvd.elastic commits survive a restart (pytfcomm.horovod.tensorflow.elastic):
    # the caller's PYTFCOMM_ELASTIC_DIR, else a directory that lives as long as we do.
    args.elastic_dir = os.environ.get("PYTFCOMM_ELASTIC_DIR", "").strip() or None
    args.own_elastic_dir = False
    if args.restarts > 0 and not args.elastic_dir:
        args.elastic_dir = tempfile.mkdtemp(prefix="pytfcomm-elastic-")
        args.own_elastic_dir = True
    try:
        first = specs_for(0)
    except (UsageError, ConfigError) as exc:
        parser.print_usage(sys.stderr)
        say(f"error: {exc}")
        _drop_elastic_dir(args)
        return USAGE_EXIT
    try:
        relay = OutputRelay(prefix=not args.no_prefix, output_dir=args.output_dir)
    except OSError as exc:
        say(f"error: --output-dir {args.output_dir!r}: {exc}")
        _drop_elastic_dir(args)
        return USAGE_EXIT

    def relay_for(attempt: int) -> OutputRelay:
        if attempt == 0:
            return relay
        return OutputRelay(prefix=not args.no_prefix, output_dir=args.output_dir, append=True)

    try:
        return run_with_restarts(
            first,
            specs_for,
            relay_for,
            restarts=args.restarts,
            kill_timeout=args.kill_timeout,
            timeout=args.timeout,
            say=say,
            membership=args.memberships.get if args.elastic else None,
        )
    finally:
        _drop_elastic_dir(args)


if __name__ == "__main__":
    sys.exit(main())
