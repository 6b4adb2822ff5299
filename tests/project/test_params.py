"""The core's PYTFCOMM_* registry (csrc/common/param_table.def): docs/parameters.md's table
is the registry's, every variable is in `info`, and a bad value is a ConfigError naming the
variable, the value and what is allowed, never silently ignored."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from _paths import ROOT

from pytfcomm import _core


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTFCOMM_")}
    env.update(extra)
    return env


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_parameters_page_table_is_the_registry() -> None:
    path = ROOT / "scripts" / "param_table.py"
    spec = importlib.util.spec_from_file_location("param_table", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.page_is_current(), "run: python scripts/param_table.py --write"


def test_every_row_is_complete() -> None:
    rows = _core.param_table()
    envs = [r["env"] for r in rows]
    assert len(envs) == len(set(envs))
    for r in rows:
        assert set(r) == {
            "name",
            "env",
            "type",
            "default",
            "range",
            "read",
            "doc",
            "value",
            "error",
        }, r
        assert r["env"].startswith("PYTFCOMM_") and r["doc"] and r["range"], r
        assert r["type"] in ("int", "float", "choice", "path", "flag", "bool"), r
        assert r["read"] in ("init", "first use"), r
    # Once read outside the registry: they are in it now.
    for name in (
        "PYTFCOMM_LOCAL_THREADS",
        "PYTFCOMM_LOCAL_CHUNK_BYTES",
        "PYTFCOMM_REDUCE_ISA",
        "PYTFCOMM_GPU_TRANSPORT",
        "PYTFCOMM_GPU_STAGE_BYTES",
        "PYTFCOMM_GPU_VERIFY",
        "PYTFCOMM_CUDA_DRIVER",
        "PYTFCOMM_NCCL_LIBRARY",
        "PYTFCOMM_YIELD_SPIN_US",
        "PYTFCOMM_NO_YIELD",
        "PYTFCOMM_YIELD",
    ):
        assert name in envs, name


def test_defaults_in_a_clean_environment() -> None:
    code = "import json\nfrom pytfcomm import _core\nprint(json.dumps(_core.param_table()))\n"
    for r in json.loads(_run(code, _clean_env())):
        assert r["error"] is None and r["value"] == r["default"], r


# (variable, value, words the message must hold): out of range, not a number,
# not one of the choices; some of these were silently ignored before.
BAD = [
    ("PYTFCOMM_SEGMENT_BYTES", "100", "expected a whole number of bytes in [4096, 2^30]"),
    ("PYTFCOMM_LOCAL_THREADS", "lots", "threads in [1, 256] or auto"),
    ("PYTFCOMM_LOCAL_CHUNK_BYTES", "1", "bytes in [4096, 2^26]"),
    ("PYTFCOMM_YIELD_SPIN_US", "-5", "microseconds in [0, 10000000]"),
    ("PYTFCOMM_TCP_STREAMS", "17", "connections in [1, 16] or auto"),
    ("PYTFCOMM_PEER_TIMEOUT", "0.1", "expected a number of seconds in [0.2, 1e+07] or off"),
    ("PYTFCOMM_SHM_RING_BYTES", "5000", "a power of two"),
    ("PYTFCOMM_REDUCE_ISA", "avx512", "expected auto or generic"),
    ("PYTFCOMM_TRANSPORT", "udp", "expected auto, tcp or shm"),
    ("PYTFCOMM_GPU_TRANSPORT", "rdma", "expected auto, nccl or staged"),
    ("PYTFCOMM_GPU_VERIFY", "yes", "expected 0 or 1"),
]


def test_bad_values_fail_init_naming_variable_value_and_range() -> None:
    # One process: every init() parses the environment again.
    code = (
        "import json, os, sys, pytfcomm\n"
        "for name, value in json.loads(sys.argv[1]):\n"
        "    os.environ[name] = value\n"
        "    try:\n"
        "        pytfcomm.init(rank=0, size=1).close()\n"
        "        print('NO ERROR', name)\n"
        "    except pytfcomm.ConfigError as e:\n"
        "        print(str(e).replace('\\n', ' '))\n"
        "    del os.environ[name]\n"
        "pytfcomm.init(rank=0, size=1).close()\n"
        "print('CLEAN OK')\n"
    )
    cases = json.dumps([(name, value) for name, value, _ in BAD])
    out = subprocess.run(
        [sys.executable, "-c", code, cases],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    lines = out.stdout.splitlines()
    assert len(lines) == len(BAD) + 1 and lines[-1] == "CLEAN OK", out.stdout + out.stderr
    for (name, value, words), line in zip(BAD, lines[:-1], strict=True):
        assert line.startswith(f"{name}='{value}' is not valid: expected "), line
        assert words in line and "unset it to use the default" in line, line


def test_info_shows_every_variable_and_a_bad_one_without_failing() -> None:
    env = _clean_env(
        PYTFCOMM_LOCAL_THREADS="lots", PYTFCOMM_REDUCE_ISA="generic", PYTFCOMM_TIMEOUT="7"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=True,
    )
    data = json.loads(out.stdout)
    assert set(data["params"]) == {r["env"] for r in _core.param_table()}
    assert data["params"]["PYTFCOMM_TIMEOUT"] == "7 s"
    assert data["params"]["PYTFCOMM_LOCAL_THREADS"].startswith(
        "error: PYTFCOMM_LOCAL_THREADS='lots' is not valid"
    )
    assert data["reduce_isa"] == "generic"  # the registry's value reached the kernels' choice


def test_flags_are_set_by_presence() -> None:
    code = (
        "from pytfcomm import _core\n"
        "rows = {r['env']: r['value'] for r in _core.param_table()}\n"
        "print(rows['PYTFCOMM_NO_YIELD'], rows['PYTFCOMM_YIELD'])\n"
    )
    assert _run(code, _clean_env(PYTFCOMM_NO_YIELD="0")).split() == ["set", "unset"]
