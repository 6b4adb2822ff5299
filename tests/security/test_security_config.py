"""Configuration mistakes give clear errors that say what to fix (issue 6):
a port in use, two processes claiming one rank, ranks disagreeing on the job
size, malformed environment values, and listeners bound only where asked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from _harness import free_port, run_ranks

import pytfcomm


def test_port_in_use_names_the_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(pytfcomm.ConfigError, match="already in use") as info:
            pytfcomm.init(rank=0, size=2, addr=f"127.0.0.1:{port}", connect_timeout=2)
    assert str(port) in str(info.value)


def test_two_processes_claiming_one_rank() -> None:
    outcomes = run_ranks(
        3, "security_workers:claim_rank", [0, 1, 1], [3, 3, 3], allow_failure=True, timeout=60
    )
    for r, (ok, res) in enumerate(outcomes):
        assert ok, (r, res)
        assert res["type"] == "ConfigError", (r, res)
        assert "claim rank 1" in res["message"] and "PYTFCOMM_RANK" in res["message"], (r, res)


def test_ranks_disagreeing_on_the_size() -> None:
    outcomes = run_ranks(
        2, "security_workers:claim_rank", [0, 1], [2, 3], allow_failure=True, timeout=60
    )
    for r, (ok, res) in enumerate(outcomes):
        assert ok, (r, res)
        assert res["type"] == "ConfigError", (r, res)
        assert "size" in res["message"], (r, res)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("PYTFCOMM_TIMEOUT", "abc", "PYTFCOMM_TIMEOUT='abc' is not valid"),
        ("PYTFCOMM_TIMEOUT", "-1", "PYTFCOMM_TIMEOUT='-1' is not valid"),
        ("PYTFCOMM_CONNECT_TIMEOUT", "1e400", "PYTFCOMM_CONNECT_TIMEOUT"),
        ("PYTFCOMM_MAX_MESSAGE", "12", "PYTFCOMM_MAX_MESSAGE='12' is not valid"),
        ("PYTFCOMM_SOCKET_BUFFER", "lots", "PYTFCOMM_SOCKET_BUFFER"),
        ("PYTFCOMM_INSECURE", "perhaps", "PYTFCOMM_INSECURE"),
        ("PYTFCOMM_SECRET", "short", "too short"),
    ],
)
def test_bad_environment_values(name: str, value: str, words: str) -> None:
    # A fresh process: the core parses its variables once per process.
    code = (
        "import pytfcomm\n"
        "try:\n"
        "    pytfcomm.init(rank=0, size=1)\n"
        "except pytfcomm.ConfigError as e:\n"
        "    print('ConfigError:', e)\n"
    )
    env = dict(os.environ, **{name: value})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.stdout.startswith("ConfigError:"), out.stdout + out.stderr
    assert words in out.stdout, out.stdout


def test_listeners_bind_only_the_configured_address() -> None:
    """Rank 0 asked for 127.0.0.2 is not reachable on 127.0.0.1 (not the wildcard)."""
    port = free_port()
    try:
        probe = socket.socket()
        probe.bind(("127.0.0.2", 0))
        probe.close()
    except OSError:
        pytest.fail("this host cannot bind 127.0.0.2; the test needs the whole 127/8 on lo")
    outcomes = run_ranks(
        2,
        "security_workers:bound_where_asked",
        f"127.0.0.2:{port}",
        allow_failure=True,
        timeout=60,
    )
    for r, (ok, res) in enumerate(outcomes):
        assert ok, (r, res)
    assert outcomes[0][1]["other_loopback_refused"], outcomes
