"""The compact verification of GPU calls agreed before (PYTFCOMM_GPU_VERIFY_CACHE,
csrc/gpu/verify_cache.h): a training loop's repeated identical all-reduces skip the
host round after the first, and a call that changes on one rank is still a
MismatchError on every rank, with the communicator usable afterwards."""

from __future__ import annotations

import pytest
from _gpu_env import GpuEnv
from _harness import run_ranks

pytestmark = pytest.mark.gpu

REPEATS = 6


def _run(gpu_env: GpuEnv, n: int, change: str, **env: str) -> list[dict]:
    gpu_env.skip_unless_nccl_ranks(n)
    e = gpu_env.with_env(
        PYTFCOMM_GPU_TRANSPORT="nccl", **{"PYTFCOMM_GPU_VERIFY_CACHE": "1", **env}
    )  # on by choice: off by default (docs/gpu.md)
    return run_ranks(n, "gpu_workers:verify_cache", REPEATS, change, env=e, timeout=150)


@pytest.mark.parametrize("n", [2, 3])
def test_repeated_calls_take_the_compact_check(gpu_env: GpuEnv, n: int) -> None:
    """The first all-reduce takes the full round, the next ones the compact check;
    every result is right."""
    for r, res in enumerate(_run(gpu_env, n, "")):
        assert res["wrong"] == 0, (r, res)
        assert res["after_repeats"] == {"full": 1, "compact": REPEATS - 1}, (r, res)
        assert res["after_all"] == {"full": 1, "compact": REPEATS}, (r, res)


@pytest.mark.parametrize("change", ["count", "op", "dtype", "shape"])
def test_a_changed_call_is_a_mismatch_on_every_rank(gpu_env: GpuEnv, change: str) -> None:
    """After the call was agreed and cached, the last of 3 ranks changes its count,
    op, dtype or shape (same count): every rank raises MismatchError (the full
    round names what differs), nothing hangs, and the next identical call runs,
    compactly again, with right results."""
    out = _run(gpu_env, 3, change)
    for r, res in enumerate(out):
        assert res["changed"].startswith("MismatchError"), (r, res)
        assert res["wrong"] == 0, (r, res)
        assert res["after_repeats"] == {"full": 1, "compact": REPEATS - 1}, (r, res)
        # the changed call: check, then the full round; the last call: compact
        assert res["after_all"] == {"full": 2, "compact": REPEATS}, (r, res)


@pytest.mark.parametrize(
    ("setting", "want"),
    [
        ({"PYTFCOMM_GPU_VERIFY_CACHE": "0"}, {"full": 0, "compact": 0}),
        ({"PYTFCOMM_GPU_VERIFY": "0"}, {"full": 0, "compact": 0}),
    ],
)
def test_settings_turn_it_off(gpu_env: GpuEnv, setting: dict, want: dict) -> None:
    """PYTFCOMM_GPU_VERIFY_CACHE=0 keeps the full round for every call (a changed
    call still a MismatchError); PYTFCOMM_GPU_VERIFY=0 checks nothing (no round, no
    compact check). Results are right either way."""
    change = "count" if "PYTFCOMM_GPU_VERIFY_CACHE" in setting else ""
    for r, res in enumerate(_run(gpu_env, 2, change, **setting)):
        assert res["wrong"] == 0, (r, res)
        assert res["after_all"] == want, (r, res)
        if change:
            assert res["changed"].startswith("MismatchError"), (r, res)
