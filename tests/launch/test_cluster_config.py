"""Tests for pytfcomm._cluster: rank/size/address resolution from arguments and environment.

Pure Python, no network, no TensorFlow.  Every test starts from an environment with all
launcher variables removed (see the autouse fixture), so it passes inside Slurm, MPI or
TF_CONFIG jobs too.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _paths import ROOT

from pytfcomm import _cluster
from pytfcomm._cluster import (
    ClusterSpec,
    address,
    default_host_id,
    format_addr,
    host_id,
    is_loopback_host,
    parse_addr,
    resolve,
    slurm_first_host,
    slurm_port,
    tf_rendezvous_port,
)
from pytfcomm.errors import ConfigError

_PREFIXES = ("PYTFCOMM_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "I_MPI_", "TF_CONFIG")
_TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

Env = Callable[..., ClusterSpec]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _TORCHRUN:
            monkeypatch.delenv(name)
    monkeypatch.setenv("PYTFCOMM_HOST_ID", "test-host")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Env:
    """Set variables in os.environ, then resolve() from it."""

    def run(**variables: str) -> ClusterSpec:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return resolve()

    return run


def raises(fn: Callable[[], Any], *fragments: str) -> str:
    with pytest.raises(ConfigError) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def tf(cluster: dict[str, Any], ttype: str = "worker", index: Any = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": ttype, "index": index}})


# --------------------------------------------------------------------------- parse_addr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1:29500", ("10.0.0.1", 29500)),
        ("node-7.cluster.local:1", ("node-7.cluster.local", 1)),
        ("[::1]:80", ("::1", 80)),
        ("[fe80::1%eth0]:5", ("fe80::1%eth0", 5)),
        ("  h:0  ", ("h", 0)),
    ],
)
def test_parse_addr_valid(text: str, expected: tuple[str, int]) -> None:
    assert parse_addr(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "it is empty"),
        ("host", "the port is missing"),
        ("::1:80", 'must be written in brackets, e.g. "[::1]:29500"'),
        ("[::1]", "add ':<port>' after ']'"),
        ("[::1:80", "never closed"),
        ("[nothost]:1", "not an IPv6 address"),
        ("h:abc", "'abc' is not a number"),
        ("h:-1", "is not a number"),
        ("h:70000", "out of range 0..65535"),
        ("h:", "the port is empty"),
        (":80", "the host is empty"),
        ("tcp://h:1", "URL scheme"),
        ("h o:1", "whitespace"),
        ("999.1.1.1:5", "not a valid IPv4 address"),
        ("h/x:1", "characters not allowed"),
    ],
)
def test_parse_addr_errors(text: str, fragment: str) -> None:
    raises(lambda: parse_addr(text, what="PYTFCOMM_ADDR"), "PYTFCOMM_ADDR=", fragment)


def test_format_addr_roundtrips_ipv6() -> None:
    assert format_addr("::1", 5) == "[::1]:5"
    assert format_addr("h", 5) == "h:5"
    assert parse_addr(format_addr("fd00::2", 29500)) == ("fd00::2", 29500)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("LocalHost", True),
        ("10.0.0.1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("node1", False),
        ("", False),
    ],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


class FakeDns:
    """getaddrinfo answered from ``table``: name -> addresses, a callable giving them, or
    an exception to raise; unknown names do not resolve. ``asked`` lists the lookups."""

    def __init__(self) -> None:
        self.table: dict[str, Any] = {}
        self.asked: list[str] = []

    def getaddrinfo(self, host: str, *_args: Any, **_kwargs: Any) -> list[tuple]:
        self.asked.append(host)
        answer = self.table.get(host, socket.gaierror(socket.EAI_NONAME, "not known"))
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            answer = answer()
        family = {True: socket.AF_INET6, False: socket.AF_INET}
        return [(family[":" in a], socket.SOCK_STREAM, 6, "", (a, 0)) for a in answer]


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDns]:
    dns = FakeDns()
    cache = address._name_is_loopback  # the per-process lookup cache
    cache.cache_clear()
    monkeypatch.setattr(socket, "getaddrinfo", dns.getaddrinfo)
    yield dns
    cache.cache_clear()


def test_names_resolving_to_loopback_are_loopback(
    fake_dns: FakeDns, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hang() -> list[str]:
        time.sleep(3)
        return ["127.0.0.1"]

    fake_dns.table.update({
        "node-lo": ["127.0.1.1"],  # Debian's /etc/hosts entry for the machine's own name
        "both-lo": ["127.0.0.1", "::1"],
        "mixed": ["127.0.0.1", "10.0.0.5"],
        "remote": ["10.0.0.5"],
        "bad-idna": UnicodeError("label too long"),
        "odd": RuntimeError("resolver bug"),
        "slow": hang,
    })  # fmt: skip
    monkeypatch.setattr(address, "DNS_TIMEOUT_S", 0.3)  # read by address._name_is_loopback
    assert is_loopback_host("node-lo") and is_loopback_host("NODE-LO.")
    assert is_loopback_host("both-lo")
    for name in ("mixed", "remote", "unknown", "bad-idna", "odd"):
        assert not is_loopback_host(name), name
    t0 = time.monotonic()
    assert not is_loopback_host("slow")
    assert time.monotonic() - t0 < 2, "the lookup was not bounded in time"
    asked = fake_dns.asked
    n = len(asked)
    assert is_loopback_host("node-lo") and len(asked) == n  # looked up once, then cached
    assert not is_loopback_host("bad/name") and not is_loopback_host("10.0.0.5")
    assert len(asked) == n  # literals and non-names are never looked up


def test_one_node_slurm_job_on_a_loopback_name_needs_no_secret(fake_dns: FakeDns, env: Env) -> None:
    """srun on a one-node cluster names the node, which /etc/hosts maps to loopback."""
    fake_dns.table["vm"] = ["127.0.1.1"]
    spec = env(SLURM_STEP_ID="0", SLURM_JOB_ID="9", SLURM_STEP_NODELIST="vm",
               SLURM_NTASKS="3", SLURM_PROCID="1")  # fmt: skip
    assert (spec.source, spec.addr, spec.all_loopback) == ("slurm", f"vm:{slurm_port(9)}", True)
    fake_dns.table["vm"] = ["192.0.2.7"]
    address._name_is_loopback.cache_clear()
    assert env().all_loopback is False


# --------------------------------------------------------------------------- explicit
# --------------------------------------------------------------------------- explicit


def test_explicit_arguments() -> None:
    r0 = resolve(rank=0, size=2, addr="10.0.0.1:29500")
    assert (r0.rank, r0.size, r0.addr, r0.bind_host) == (0, 2, "10.0.0.1:29500", "10.0.0.1")
    assert (r0.source, r0.all_loopback, r0.host_id) == ("explicit", False, "test-host")
    r1 = resolve(rank=1, size=2, addr="10.0.0.1:29500")
    assert r1.bind_host == ""
    assert r1.rendezvous == ("10.0.0.1", 29500)


def test_explicit_single_process_may_omit_addr() -> None:
    spec = resolve(rank=0, size=1)
    assert (spec.addr, spec.bind_host, spec.all_loopback) == ("127.0.0.1:0", "127.0.0.1", True)


def test_explicit_missing_arguments_are_listed() -> None:
    raises(lambda: resolve(rank=0), "missing: size, addr")
    raises(lambda: resolve(rank=1, size=2), "missing: addr")
    raises(lambda: resolve(addr="h:1"), "missing: rank, size")


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"rank": 2, "size": 2, "addr": "h:1"}, ("rank=2 is out of range", "0 <= rank < 2")),
        ({"rank": 0, "size": 0, "addr": "h:1"}, ("size=0 is invalid",)),
        ({"rank": 0, "size": 2, "addr": "h:0"}, ("port 0 is invalid", "1..65535")),
        ({"rank": True, "size": 2, "addr": "h:1"}, ("rank must be an int",)),
        ({"rank": 0, "size": 2, "addr": "h"}, ("resolve(addr)=", "port is missing")),
    ],
)
def test_explicit_invalid(kwargs: dict[str, Any], fragments: tuple[str, ...]) -> None:
    raises(lambda: resolve(**kwargs), *fragments)


def test_explicit_beats_environment(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTFCOMM_RANK", "not-a-number")
    monkeypatch.setenv("TF_CONFIG", "{broken")
    spec = resolve(rank=1, size=3, addr="[::1]:7000")
    assert (spec.source, spec.rank, spec.addr, spec.all_loopback) == (
        "explicit",
        1,
        "[::1]:7000",
        True,
    )


# --------------------------------------------------------------------------- PYTFCOMM_*


def test_pytfcomm_env(env: Env) -> None:
    spec = env(PYTFCOMM_RANK="0", PYTFCOMM_SIZE="4", PYTFCOMM_ADDR="localhost:29500")
    assert (spec.rank, spec.size, spec.source) == (0, 4, "PYTFCOMM")
    assert (spec.addr, spec.bind_host, spec.all_loopback) == ("127.0.0.1:29500", "127.0.0.1", True)


def test_pytfcomm_env_rank_without_size_and_size_without_rank(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    raises(lambda: env(PYTFCOMM_RANK="1"), "PYTFCOMM_SIZE is not", "set PYTFCOMM_SIZE")
    monkeypatch.delenv("PYTFCOMM_RANK")
    raises(lambda: env(PYTFCOMM_SIZE="2"), "PYTFCOMM_RANK is not", "set PYTFCOMM_RANK")


def test_pytfcomm_env_addr_required_above_one_process(env: Env) -> None:
    raises(
        lambda: env(PYTFCOMM_RANK="0", PYTFCOMM_SIZE="2"),
        "PYTFCOMM_ADDR is not set",
        "PYTFCOMM_ADDR=10.0.0.1:29500",
    )


def test_pytfcomm_env_single_process_without_addr(env: Env) -> None:
    spec = env(PYTFCOMM_RANK="0", PYTFCOMM_SIZE="1")
    assert (spec.addr, spec.source) == ("127.0.0.1:0", "PYTFCOMM")


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        (
            {"PYTFCOMM_RANK": "one", "PYTFCOMM_SIZE": "2"},
            ("PYTFCOMM_RANK='one' is not an integer",),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "1_0"},
            ("PYTFCOMM_SIZE='1_0' is not an integer",),
        ),
        (
            {"PYTFCOMM_RANK": "2", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_RANK=2 is out of range for PYTFCOMM_SIZE=2",),
        ),
        (
            {"PYTFCOMM_RANK": "-1", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_RANK=-1 is out of range",),
        ),
        ({"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "0"}, ("PYTFCOMM_SIZE=0 is invalid",)),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:0"},
            ("PYTFCOMM_ADDR: port 0 is invalid",),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "fd00::1:5"},
            ("PYTFCOMM_ADDR='fd00::1:5'", "brackets"),
        ),
    ],
)
def test_pytfcomm_env_invalid(
    env: Env, variables: dict[str, str], fragments: tuple[str, ...]
) -> None:
    raises(lambda: env(**variables), *fragments)


def test_bind_host_override(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"PYTFCOMM_RANK": "1", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "127.0.0.1:5000"}
    spec = env(**base, PYTFCOMM_BIND_HOST="0.0.0.0")
    assert (spec.bind_host, spec.all_loopback) == ("0.0.0.0", False)
    assert env(PYTFCOMM_BIND_HOST="[::1]").bind_host == "::1"
    raises(
        lambda: env(PYTFCOMM_BIND_HOST="10.0.0.2:80"),
        "PYTFCOMM_BIND_HOST='10.0.0.2:80'",
        "without a port",
    )


def test_addr_without_rank_or_launcher_is_an_error(env: Env) -> None:
    raises(
        lambda: env(PYTFCOMM_ADDR="10.0.0.1:29500"),
        "PYTFCOMM_ADDR is set",
        "set PYTFCOMM_RANK and PYTFCOMM_SIZE",
    )


def test_pytfcomm_env_beats_tf_config_and_slurm(env: Env) -> None:
    spec = env(
        PYTFCOMM_RANK="1",
        PYTFCOMM_SIZE="2",
        PYTFCOMM_ADDR="h:1",
        TF_CONFIG=tf({"worker": ["a:1", "b:1", "c:1"]}, index=2),
        SLURM_PROCID="5",
        SLURM_NTASKS="8",
        SLURM_STEP_ID="0",
    )
    assert (spec.source, spec.rank, spec.size) == ("PYTFCOMM", 1, 2)


# --------------------------------------------------------------------------- TF_CONFIG

CLUSTER = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"], "evaluator": ["e0:2222"]}


@pytest.mark.parametrize(
    ("ttype", "index", "rank", "bind"),
    [("chief", 0, 0, "c0"), ("worker", 0, 1, "w0"), ("worker", 1, 2, "w1")],
)
def test_tf_config_chief_first_then_workers(
    env: Env, ttype: str, index: int, rank: int, bind: str
) -> None:
    spec = env(TF_CONFIG=tf(CLUSTER, ttype, index))
    assert (spec.rank, spec.size, spec.source, spec.bind_host) == (rank, 3, "TF_CONFIG", bind)
    assert spec.addr == "c0:3222"  # chief's host, TF port + 1000
    assert spec.all_loopback is False


def test_tf_config_without_chief_rank0_is_worker0(env: Env) -> None:
    spec = env(TF_CONFIG=tf({"worker": ["w0:5000", "w1:5000"]}, "worker", 1))
    assert (spec.rank, spec.size, spec.addr, spec.bind_host) == (1, 2, "w0:6000", "w1")


def test_tf_config_localhost_is_loopback(env: Env) -> None:
    cluster = {"worker": ["localhost:12345", "localhost:12346"]}
    spec = env(TF_CONFIG=tf(cluster, "worker", 1))
    assert (spec.addr, spec.bind_host, spec.all_loopback) == ("127.0.0.1:13345", "127.0.0.1", True)


def test_tf_config_port_skips_every_listed_port_and_agrees_across_ranks(env: Env) -> None:
    cluster = {"chief": ["c:4000"], "worker": ["w0:5000", "w1:5001"], "evaluator": ["e:5002"]}
    addrs = set()
    for ttype, index in [("chief", 0), ("worker", 0), ("worker", 1)]:
        addrs.add(env(TF_CONFIG=tf(cluster, ttype, index)).addr)
    assert addrs == {"c:5003"}  # 4000 + 1000 = 5000; 5000..5002 are TF ports on some host


def test_tf_rendezvous_port_wraps_into_range() -> None:
    assert tf_rendezvous_port(2222, [2222]) == 3222
    assert tf_rendezvous_port(65535, []) == 2023  # 66535 wraps to 1024 + 999
    assert tf_rendezvous_port(64535, [64535, 65535]) == 1024  # 65535 taken: wrap to 1024
    assert tf_rendezvous_port(10, []) == 1010 + 64512  # below 1024 wraps to the top
    assert tf_rendezvous_port(2222, [2222]) == tf_rendezvous_port(2222, [2222])


def test_tf_config_port_and_addr_overrides(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tf({"worker": ["w0:5000", "w1:5000"]}, "worker", 1)
    assert env(TF_CONFIG=config, PYTFCOMM_PORT="7000").addr == "w0:7000"
    raises(
        lambda: env(PYTFCOMM_PORT="5000"),
        "PYTFCOMM_PORT=5000 is the TensorFlow port",
        "cluster.worker[0]",
    )
    monkeypatch.delenv("PYTFCOMM_PORT")
    assert env(PYTFCOMM_ADDR="[fd00::9]:8000").addr == "[fd00::9]:8000"


MIGRATING = ROOT / "docs" / "migrating.md"


def _doc_sections(path: Path) -> set[str]:
    """GitHub's anchors for the Markdown headings of ``path`` (code blocks skipped)."""
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} +(.+?) *$", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return anchors


def _points_to_migrating(message: str, section: str) -> None:
    """The message names docs/migrating.md#<section>, and that section exists."""
    assert f"docs/migrating.md#{section}" in message, message
    assert section in _doc_sections(MIGRATING), f"no section #{section} in {MIGRATING}"


def test_tf_config_evaluator_is_refused(env: Env) -> None:
    message = raises(
        lambda: env(TF_CONFIG=tf(CLUSTER, "evaluator", 0)),
        "evaluators don't join collectives",
        "evaluator",
        "separate process that reads the chief's checkpoints",
    )
    _points_to_migrating(message, "no-evaluator-task")


@pytest.mark.parametrize(
    ("ttype", "index"), [("worker", 0), ("worker", 1), ("chief", 0), ("ps", 0)]
)
def test_tf_config_parameter_servers_are_refused(env: Env, ttype: str, index: int) -> None:
    """Whichever task this process is: a ParameterServerStrategy cluster (chief, workers,
    ps) is refused, with what to do and where the migration is described."""
    cluster = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:1"]}
    message = raises(
        lambda: env(TF_CONFIG=tf(cluster, ttype, index)),
        '"ps"',
        "p0:1",
        "parameter-server clusters are not supported by all-reduce",
        'remove "ps"',
        "asynchronous updates",
    )
    _points_to_migrating(message, "no-parameter-servers")


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        (
            '{"cluster": {"worker": ["a:1"]}, task}',
            ("not valid JSON", "line 1 column", '\'{"cluster"'),
        ),
        ("[1, 2]", ("must be a JSON object",)),
        ('{"task": {"type": "worker", "index": 0}}', ('has no "cluster"',)),
        ('{"cluster": {"worker": ["a:1"]}}', ('has no "task"',)),
        (tf({"worker": "a:1"}), ("cluster.worker is 'a:1'", "a list of")),
        (tf({"worker": ["a:1", 7]}), ("cluster.worker[1] is '7'",)),
        (tf({"worker": ["a:1", "b"]}), ("TF_CONFIG cluster.worker[1]='b'", "port is missing")),
        (tf({"worker": ["a:0"]}), ("port 0",)),
        (tf({"boss": ["a:1"]}), ("unsupported task type(s) 'boss'", '(or "master")')),
        (tf({"chief": ["a:1", "b:1"], "worker": []}), ("cluster.chief has 2 entries",)),
        (tf({"evaluator": ["e:1"]}, "worker"), ('no "chief" or "worker"',)),
        (tf({"worker": ["a:1"]}, "boss"), ("task.type is 'boss'", '"chief" or "worker"')),
        (
            tf({"worker": ["a:1"], "ps": []}, "ps"),
            ("task.type is 'ps'", "docs/migrating.md#no-parameter-servers"),
        ),
        (tf({"worker": ["a:1"]}, "worker", "x"), ("task.index is 'x'",)),
        (tf({"worker": ["a:1"]}, "worker", None), ("task.index is missing",)),
        (
            tf({"worker": ["a:1", "b:1"]}, "worker", 2),
            ("out of range", "cluster.worker has 2 entries", "valid indices: 0..1"),
        ),
        (tf({"worker": ["a:1"]}, "chief", 0), ("cluster.chief has 0 entries",)),
        (
            tf({"chief": ["a:1"], "worker": ["b:1", "a:1"]}),
            ("'a:1' twice", "cluster.chief[0]", "cluster.worker[1]"),
        ),
        (tf({"worker": ["localhost:9", "127.0.0.1:9"]}), ("twice",)),
    ],
)
def test_tf_config_errors(env: Env, config: str, fragments: tuple[str, ...]) -> None:
    message = raises(lambda: env(TF_CONFIG=config), "TF_CONFIG", *fragments)
    assert "Example: TF_CONFIG=" in message or "TF_CONFIG cluster." in message


def test_tf_config_string_index_accepted(env: Env) -> None:
    assert env(TF_CONFIG=tf({"worker": ["a:1", "b:1"]}, "worker", "1")).rank == 1


# --------------------------------------------------------------------------- Slurm

SRUN = {
    "SLURM_STEP_ID": "2",
    "SLURM_JOB_ID": "123456",
    "SLURM_NTASKS": "4",
    "SLURM_JOB_NODELIST": "node[03-05,7],gpu1",
}


def test_slurm(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    port = 20000 + (123456 * 31 + 2) % 20000
    spec = env(**SRUN, SLURM_PROCID="3", SLURM_LOCALID="1")
    assert (spec.rank, spec.size, spec.source, spec.local_rank) == (3, 4, "slurm", 1)
    assert (spec.addr, spec.bind_host, spec.all_loopback) == (f"node03:{port}", "", False)
    assert env(SLURM_PROCID="0").bind_host == "node03"


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("node[03-05,7],gpu1", "node03"),
        ("a-[1-2]", "a-1"),
        ("nodeA,nodeB", "nodeA"),
        ("n[7,03-05]", "n7"),
        ("rack[1-2]-n[08-09]", "rack1-n08"),
        ("node[001-128]-ib", "node001-ib"),
        ("solo", "solo"),
    ],
)
def test_slurm_first_host(nodelist: str, first: str) -> None:
    assert slurm_first_host(nodelist) == first


@pytest.mark.parametrize(
    ("nodelist", "fragment"),
    [
        ("", "empty"),
        ("node[1-2", "never closed"),
        ("node]1", "']' without '['"),
        ("n[a-b]", "does not start with a number"),
        (",x", "first host"),
    ],
)
def test_slurm_first_host_errors(nodelist: str, fragment: str) -> None:
    raises(
        lambda: slurm_first_host(nodelist, what="SLURM_STEP_NODELIST"),
        "SLURM_STEP_NODELIST=",
        fragment,
        "PYTFCOMM_ADDR",
    )


def test_slurm_prefers_step_values(env: Env) -> None:
    spec = env(**SRUN, SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST="gpu[10-11]")
    assert (spec.size, spec.addr.split(":")[0]) == (2, "gpu10")


def test_slurm_port_derivation() -> None:
    ports = {slurm_port(job, step) for job in range(1000, 1100) for step in range(3)}
    assert len(ports) == 300  # nearby jobs and steps never collide
    assert all(20000 <= p <= 39999 for p in ports)
    assert slurm_port(987654321, 7) == slurm_port(987654321, 7)


def test_slurm_port_and_addr_overrides(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    assert env(**SRUN, SLURM_PROCID="1", PYTFCOMM_PORT="31000").addr == "node03:31000"
    spec = env(PYTFCOMM_ADDR="10.1.1.1:4444")
    assert (spec.addr, spec.source) == ("10.1.1.1:4444", "slurm")
    raises(lambda: env(PYTFCOMM_PORT="99999"), "PYTFCOMM_PORT=99999 is out of range")


def test_slurm_batch_script_is_not_a_task(env: Env) -> None:
    # sbatch's batch step has SLURM_PROCID=0 and the allocation's SLURM_NTASKS, but no step id.
    spec = env(SLURM_PROCID="0", SLURM_NTASKS="8", SLURM_JOB_ID="5", SLURM_JOB_NODELIST="n1")
    assert (spec.source, spec.size) == ("single", 1)


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        (
            {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "n1"},
            ("SLURM_NTASKS", "srun -n"),
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1"},
            ("SLURM_JOB_NODELIST", "PYTFCOMM_ADDR="),
        ),
        (
            {
                "SLURM_PROCID": "0",
                "SLURM_STEP_ID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_JOB_NODELIST": "n1",
            },
            ("SLURM_JOB_ID", "PYTFCOMM_PORT"),
        ),
        (
            {"SLURM_PROCID": "4", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4"},
            ("SLURM_PROCID=4 is out of range for SLURM_NTASKS=4",),
        ),
    ],
)
def test_slurm_errors(env: Env, variables: dict[str, str], fragments: tuple[str, ...]) -> None:
    raises(lambda: env(**variables), *fragments)


def test_slurm_and_mpi_agreeing_is_slurm(env: Env) -> None:
    # srun --mpi=pmix / pmi2 sets MPI variables that match SLURM_PROCID.
    spec = env(**SRUN, SLURM_PROCID="2", PMI_RANK="2", PMI_SIZE="4")
    assert spec.source == "slurm"


def test_mpirun_inside_slurm_allocation_uses_mpi(env: Env) -> None:
    # Ranks inherit the Slurm variables of the step that started the MPI daemons.
    spec = env(
        SLURM_PROCID="0",
        SLURM_STEP_ID="0",
        SLURM_NTASKS="1",
        SLURM_JOB_ID="9",
        SLURM_JOB_NODELIST="n1",
        OMPI_COMM_WORLD_RANK="3",
        OMPI_COMM_WORLD_SIZE="4",
        OMPI_COMM_WORLD_LOCAL_SIZE="4",
        OMPI_MCA_ess_base_jobid="77",
    )
    assert (spec.source, spec.rank, spec.size) == ("mpi", 3, 4)


# --------------------------------------------------------------------------- MPI


def test_open_mpi_single_host(env: Env) -> None:
    port = 20000 + zlib.crc32(b"3735945217") % 20000
    spec = env(
        OMPI_COMM_WORLD_RANK="2",
        OMPI_COMM_WORLD_SIZE="4",
        OMPI_COMM_WORLD_LOCAL_RANK="2",
        OMPI_COMM_WORLD_LOCAL_SIZE="4",
        OMPI_MCA_ess_base_jobid="3735945217",
    )
    assert (spec.rank, spec.size, spec.source) == (2, 4, "mpi")
    assert (spec.addr, spec.bind_host, spec.all_loopback) == (
        f"127.0.0.1:{port}",
        "127.0.0.1",
        True,
    )
    assert (spec.local_rank, spec.local_size) == (2, 4)


def test_mpich_hydra_and_intel_mpi(env: Env) -> None:
    spec = env(
        PMI_RANK="1",
        PMI_SIZE="2",
        MPI_LOCALRANKID="1",
        MPI_LOCALNRANKS="2",
        I_MPI_HYDRA_UUID="a1b2-c3",
    )
    assert (spec.rank, spec.size, spec.local_rank) == (1, 2, 1)
    assert spec.addr == f"127.0.0.1:{20000 + zlib.crc32(b'a1b2-c3') % 20000}"


def test_pmix_size_from_pmi_size(env: Env) -> None:
    spec = env(
        PMIX_RANK="1", PMI_SIZE="3", MPI_LOCALNRANKS="3", PMIX_NAMESPACE="prterun-host-4242@1"
    )
    assert (spec.rank, spec.size, spec.source) == (1, 3, "mpi")
    assert spec.rendezvous[1] == 20000 + zlib.crc32(b"prterun-host-4242@1") % 20000


def test_mpirun_across_hosts_needs_addr(env: Env) -> None:
    mpi = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "OMPI_MCA_ess_base_jobid": "1",
    }
    raises(
        lambda: env(**mpi),
        "mpirun across hosts: set PYTFCOMM_ADDR=<rank0 host>:<port>",
        "-x PYTFCOMM_ADDR",
    )
    spec = env(PYTFCOMM_ADDR="head:29500")
    assert (spec.addr, spec.bind_host, spec.rank) == ("head:29500", "", 5)


def test_mpi_errors(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    raises(
        lambda: env(PMI_RANK="0", PMI_SIZE="2", MPI_LOCALNRANKS="2"),
        "no job identifier",
        "PYTFCOMM_PORT",
    )
    assert env(PYTFCOMM_PORT="29501").addr == "127.0.0.1:29501"
    monkeypatch.delenv("MPI_LOCALNRANKS")
    raises(lambda: env(), "MPI_LOCALNRANKS", "PYTFCOMM_ADDR=<rank0 host>:<port>")
    for name in ("PMI_RANK", "PMI_SIZE", "PYTFCOMM_PORT"):
        monkeypatch.delenv(name)
    raises(lambda: env(PMIX_RANK="0"), "PMIx: PMIX_RANK is set", "OMPI_COMM_WORLD_SIZE")


def test_mpi_single_process_needs_no_job_id(env: Env) -> None:
    spec = env(PMI_RANK="0", PMI_SIZE="1")
    assert (spec.addr, spec.source, spec.size) == ("127.0.0.1:0", "mpi", 1)


# --------------------------------------------------------------------------- single / host id


def test_single_process_default(env: Env) -> None:
    spec = env()
    assert spec == ClusterSpec(
        rank=0,
        size=1,
        addr="127.0.0.1:0",
        bind_host="127.0.0.1",
        host_id="test-host",
        source="single",
        all_loopback=True,
    )


def test_environ_argument_replaces_os_environ(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTFCOMM_RANK", "junk")
    spec = resolve(
        environ={
            "PYTFCOMM_RANK": "1",
            "PYTFCOMM_SIZE": "2",
            "PYTFCOMM_ADDR": "h:1",
            "PYTFCOMM_HOST_ID": "sim-b",
        }
    )
    assert (spec.rank, spec.host_id) == (1, "sim-b")


def test_default_host_id(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    assert default_host_id() == "test-host"
    monkeypatch.delenv("PYTFCOMM_HOST_ID")
    # Patched where default_host_id() reads them (pytfcomm/_cluster/host_id.py).
    monkeypatch.setattr(host_id.socket, "gethostname", lambda: "box")
    monkeypatch.setattr(host_id, "_IPC_NS_PATH", str(tmp_path / "missing-ns"))
    monkeypatch.setattr(host_id, "_BOOT_ID_PATH", str(tmp_path / "missing-boot"))
    assert default_host_id() == "box"
    boot = tmp_path / "boot_id"
    boot.write_text("1111-aaaa\n")
    monkeypatch.setattr(host_id, "_BOOT_ID_PATH", str(boot))
    first = default_host_id()
    assert first == "box/1111-aaaa"
    boot.write_text("2222-bbbb\n")  # same hostname, other machine
    assert default_host_id() != first
    assert resolve().host_id == "box/2222-bbbb"


# --------------------------------------------------------------------------- ranges (issue 13)

_HUGE = "9" * 5000  # over Python's 4300-digit limit for int(str)
_SRUN_1 = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}
_OMPI = {"OMPI_MCA_ess_base_jobid": "42"}


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        # PYTFCOMM_*
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "99999999999", "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_SIZE=99999999999 is out of range", "1..32767"),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "32768", "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_SIZE=32768 is out of range", "1..32767"),
        ),
        (
            {"PYTFCOMM_RANK": str(2**40), "PYTFCOMM_SIZE": str(2**41), "PYTFCOMM_ADDR": "h:1"},
            (f"PYTFCOMM_SIZE={2**41} is out of range", "1..32767"),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": _HUGE, "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_SIZE='99999", "is out of range", "1..32767"),
        ),
        (
            {"PYTFCOMM_RANK": _HUGE, "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:1"},
            ("PYTFCOMM_RANK='99999", "is out of range", "0 <= rank < PYTFCOMM_SIZE"),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:" + _HUGE},
            ("PYTFCOMM_ADDR=", "out of range 0..65535"),
        ),
        (
            {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:1",
             "PYTFCOMM_LOCAL_RANK": str(2**40)},
            (f"PYTFCOMM_LOCAL_RANK={2**40} is out of range", "< 2"),
        ),
        # overrides of derived ports
        (
            {**_SRUN_1, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "PYTFCOMM_PORT": _HUGE},
            ("PYTFCOMM_PORT='99999", "is out of range", "1..65535"),
        ),
        (
            {**_SRUN_1, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "PYTFCOMM_PORT": "65536"},
            ("PYTFCOMM_PORT=65536 is out of range", "1..65535"),
        ),
        # Slurm
        (
            {**_SRUN_1, "SLURM_PROCID": "0", "SLURM_NTASKS": str(2**31)},
            (f"SLURM_NTASKS={2**31} is out of range", "1..32767"),
        ),
        (
            {**_SRUN_1, "SLURM_PROCID": str(2**40), "SLURM_STEP_NUM_TASKS": str(2**41)},
            (f"SLURM_STEP_NUM_TASKS={2**41} is out of range", "1..32767"),
        ),
        (
            {**_SRUN_1, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": str(2**40)},
            (f"SLURM_LOCALID={2**40} is out of range", "< 2 (SLURM_NTASKS)"),
        ),
        # MPI
        (
            {**_OMPI, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "99999999999",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "99999999999"},
            ("OMPI_COMM_WORLD_SIZE=99999999999 is out of range", "1..32767"),
        ),
        (
            {"PMI_RANK": "0", "PMI_SIZE": "40000", "PYTFCOMM_PORT": "5000"},
            ("PMI_SIZE=40000 is out of range", "1..32767"),
        ),
        (
            {**_OMPI, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(2**40)},
            (f"OMPI_COMM_WORLD_LOCAL_RANK={2**40} is out of range", "< 2"),
        ),
        # TF_CONFIG
        (
            {"TF_CONFIG": tf({"worker": ["a:1", "b:1"]}, "worker", _HUGE)},
            ("TF_CONFIG task", "is out of range", "valid indices: 0..1"),
        ),
        (
            {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
                          f'"index": {_HUGE}}}}}'},
            ("TF_CONFIG holds a number with too many digits",),
        ),
        (
            {"TF_CONFIG": tf({"worker": ["a:" + _HUGE]})},
            ("TF_CONFIG cluster.worker[0]=", "out of range 0..65535"),
        ),
    ],
)  # fmt: skip
def test_out_of_range_numbers_are_config_errors(
    env: Env, variables: dict[str, str], fragments: tuple[str, ...]
) -> None:
    message = raises(lambda: env(**variables), *fragments)
    assert len(message) < 1000, message


def test_tf_config_with_too_many_tasks(env: Env) -> None:
    workers = [f"w{i}:1" for i in range(_cluster.MAX_SIZE + 1)]
    raises(lambda: env(TF_CONFIG=tf({"worker": workers})), "32768 chief and worker", "1..32767")
    assert env(TF_CONFIG=tf({"worker": workers[:-1]}, "worker", 32766)).size == 32767


def test_largest_job_is_accepted(env: Env) -> None:
    spec = env(PYTFCOMM_RANK="32766", PYTFCOMM_SIZE="32767", PYTFCOMM_ADDR="h:1")
    assert (spec.rank, spec.size) == (32766, 32767)
    assert _cluster.MAX_SIZE == 2**15 - 1
    raises(lambda: resolve(rank=0, size=2**31, addr="h:1"), "size=2147483648 is out of range")
    raises(lambda: resolve(rank=0, size=10**5000, addr="h:1"), "size=<a 16610-bit integer>")
