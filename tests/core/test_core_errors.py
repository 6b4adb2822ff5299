"""Bad arguments, disagreeing ranks, and lost peers give clear errors, never hangs."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _harness import collect_survivors, run_ranks, start_ranks

import pytfcomm


@pytest.fixture(scope="module")
def solo():
    """A single-rank communicator: argument checks need no peers."""
    with pytfcomm.init(rank=0, size=1) as comm:
        yield comm


def test_single_rank_collectives_are_identity(solo) -> None:
    x = np.arange(10, dtype=np.float32)
    assert np.array_equal(solo.allreduce(x), x)
    assert np.array_equal(solo.allreduce(x, "mean"), x)
    assert np.array_equal(solo.broadcast(x), x)
    assert np.array_equal(solo.allgather(x), x)
    assert np.array_equal(solo.reduce_scatter(x), x)
    solo.barrier()
    assert (solo.rank, solo.size, solo.local_rank, solo.local_size) == (0, 1, 0, 1)


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda c: c.allreduce([1.0, 2.0]), TypeError, "numpy.ndarray"),
        (lambda c: c.allreduce(np.ones((4, 4), np.float32)[:, 1]), ValueError, "C-contiguous"),
        (lambda c: c.allreduce(np.ones(3, np.complex64)), ValueError, "complex64"),
        (lambda c: c.allreduce(np.ones(3, np.float32), op="avg"), ValueError, "op must be"),
        (lambda c: c.allreduce(np.ones(3, bool), op="mean"), ValueError, "bool"),
        (lambda c: c.allreduce(np.ones(3), algorithm="tree"), ValueError, "algorithm"),
        (lambda c: c.allreduce(np.ones(3), out=np.ones(4)), ValueError, "shape"),
        (lambda c: c.allreduce(np.ones(3), out=np.ones(3, np.float32)), ValueError, "dtype"),
        (lambda c: c.broadcast(np.ones(3), root=1), ValueError, "root"),
        (lambda c: c.broadcast(np.ones(3), root=-1), ValueError, "root"),
        (lambda c: c.broadcast(np.ones(3), root="0"), TypeError, "root"),
        (lambda c: c.allgather(np.array(1.0)), ValueError, "dimension"),
        (lambda c: c.allreduce(np.ones(3), timeout=0), ValueError, "timeout"),
    ],
)
def test_bad_arguments_raise_clear_errors(solo, call, exc, words) -> None:
    with pytest.raises(exc, match=words):
        call(solo)
    # The communicator is still usable after an argument error.
    assert solo.allreduce(np.ones(2))[0] == 1.0


def test_read_only_output_is_refused(solo) -> None:
    out = np.ones(3)
    out.flags.writeable = False
    with pytest.raises(pytfcomm.InvalidArgumentError, match="read-only"):
        solo.allreduce(np.ones(3), out=out)
    ro = np.ones(3)
    ro.flags.writeable = False
    assert solo.allreduce(ro)[0] == 1.0  # a read-only input is fine


def test_the_core_words_an_argument_rule_as_the_python_api(solo) -> None:
    # The NumPy API checks first (_args.py); the core checks again for callers of
    # _core. One rule, one wording: only the array's name differs.
    from pytfcomm._dtypes import algorithm_code, dtype_code, op_code

    def refusal(call) -> str:
        with pytest.raises(pytfcomm.InvalidArgumentError) as info:
            call()
        # The core adds where it checked, e.g. " [module.cc:101]".
        return re.sub(r" \[[\w.]+:\d+\]$", "", str(info.value).split(" ", 1)[1])

    def core(x: np.ndarray, out: np.ndarray) -> None:
        code = dtype_code(x.dtype)
        solo._core.allreduce(x, out, code, op_code("sum"), algorithm_code("auto"), -1.0)

    ro = np.ones(3)
    ro.flags.writeable = False
    assert refusal(lambda: core(np.ones(3), ro)) == refusal(
        lambda: solo.allreduce(np.ones(3), out=ro)
    )
    strided = np.ones((3, 4))[:, ::2]
    assert refusal(lambda: core(strided, np.ones((3, 2)))) == refusal(
        lambda: solo.allreduce(strided)
    )


def test_closed_communicator_says_so() -> None:
    comm = pytfcomm.init(rank=0, size=1)
    comm.close()
    comm.close()  # idempotent
    assert comm.closed
    with pytest.raises(pytfcomm.CommClosedError, match="closed"):
        comm.allreduce(np.ones(2))


def test_bad_init_arguments() -> None:
    with pytest.raises(pytfcomm.InvalidArgumentError, match=r"0 <= rank < size=2"):
        pytfcomm.init(rank=2, size=2, addr="127.0.0.1:1234")
    with pytest.raises(pytfcomm.InvalidArgumentError, match="needs addr"):
        pytfcomm.init(rank=0, size=2)  # no address


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"rank": 0, "size": 2**31}, "init(size=2147483648) is out of range: the job size "
                                     "must be in 1..32767"),
        ({"rank": 0, "size": 32768}, "init(size=32768) is out of range"),
        ({"rank": 0, "size": 0}, "init(size=0) is out of range"),
        ({"rank": 2**40, "size": 4}, "init(rank=1099511627776) is out of range: the rank must "
                                     "satisfy 0 <= rank < size=4"),
        ({"rank": 2**40, "size": 2**41}, "init(size=2199023255552) is out of range"),
        ({"rank": -1, "size": 4}, "init(rank=-1) is out of range"),
        ({"rank": 0, "size": 10**5000}, "init(size=<a 16610-bit integer>) is out of range"),
        ({"rank": 0, "size": 2.0}, "init(size=2.0): size must be an int"),
        ({"rank": True, "size": 2}, "init(rank=True): rank must be an int"),
        ({"rank": 0, "size": 2, "addr": "127.0.0.1:70000"}, "out of range 0..65535"),
        ({"rank": 0, "size": 2, "addr": "127.0.0.1:" + "9" * 5000}, "out of range 0..65535"),
        ({"rank": 0, "size": 2, "addr": "127.0.0.1:0"}, "port 0 is out of range"),
        ({"rank": 0, "size": 2, "addr": 29500}, "addr must be a string"),
        ({"size": 2, "addr": "127.0.0.1:1"}, "missing: rank"),
    ],
)  # fmt: skip
def test_out_of_range_init_arguments(kwargs: dict, words: str) -> None:
    """Arguments the core cannot take are the caller's error, never pybind11's TypeError."""
    kwargs.setdefault("addr", "127.0.0.1:29500")
    with pytest.raises(pytfcomm.InvalidArgumentError) as info:
        pytfcomm.init(connect_timeout=1, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ({"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "99999999999"},
         "PYTFCOMM_SIZE=99999999999 is out of range: the job size must be in 1..32767"),
        ({"PYTFCOMM_RANK": str(2**40), "PYTFCOMM_SIZE": str(2**41)},
         f"PYTFCOMM_SIZE={2**41} is out of range"),
        ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "5",
          "SLURM_JOB_NODELIST": "localhost", "SLURM_NTASKS": str(2**31)},
         f"SLURM_NTASKS={2**31} is out of range"),
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "40000",
          "OMPI_COMM_WORLD_LOCAL_SIZE": "40000", "OMPI_MCA_ess_base_jobid": "1"},
         "OMPI_COMM_WORLD_SIZE=40000 is out of range"),
    ],
)  # fmt: skip
def test_out_of_range_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], words: str
) -> None:
    launcher_vars = ("PYTFCOMM_RANK", "PYTFCOMM_SIZE", "PYTFCOMM_ADDR", "PYTFCOMM_PORT",
                     "TF_CONFIG", "SLURM_", "OMPI_", "PMI", "MPI_LOCAL", "I_MPI_")  # fmt: skip
    for name in [n for n in os.environ if n.startswith(launcher_vars)]:
        monkeypatch.delenv(name)
    for name, value in {"PYTFCOMM_ADDR": "127.0.0.1:29500", **variables}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(pytfcomm.ConfigError) as info:
        pytfcomm.init(connect_timeout=1)
    assert words in str(info.value)


def test_unreachable_rank0_times_out_with_advice() -> None:
    with pytest.raises(pytfcomm.CommTimeoutError, match="rank 0") as info:
        pytfcomm.init(rank=1, size=2, addr="127.0.0.1:9", connect_timeout=0.5)
    assert "PYTFCOMM_CONNECT_TIMEOUT" in str(info.value)


MISMATCHES = ["mismatched_count", "mismatched_dtype", "mismatched_order", "mismatched_root"]


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", [10, 300_000], ids=["small", "large"])
@pytest.mark.parametrize("worker", MISMATCHES)
def test_mismatch_is_an_error_on_every_rank(worker: str, n: int, transport: str) -> None:
    """Every rank raises MismatchError in the call itself, naming what each rank
    asked for; nothing moved, so the communicator stays usable on every rank. The
    same on every transport and at every size (small ones travel with the
    negotiation, large ones would not)."""
    results = run_ranks(
        3, f"error_workers:{worker}", n, timeout=60, env={"PYTFCOMM_TRANSPORT": transport}
    )
    for r, res in enumerate(results):
        assert res["type"] == "MismatchError", (r, res)
        assert "disagree" in res["message"], (r, res)
        assert re.search(r"ranks? 0\b", res["message"]), (r, res)
        assert "still usable" in res["message"], (r, res)
        assert res["after"] == 3.0, (r, res)


# Every survivor names the lost rank and its address, whichever transport
# carries the news to it (the crash itself, or a neighbour's abort).
LOST_RANK_2 = re.compile(r"rank 2 \(127\.0\.0\.1[:,)]")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_killed_peer_is_detected_at_once(transport: str) -> None:
    outcomes = run_ranks(
        3,
        "error_workers:peer_dies",
        timeout=60,
        allow_failure=True,
        env={"PYTFCOMM_TRANSPORT": transport},
    )
    for r in range(2):
        ok, res = outcomes[r]
        assert ok, res
        assert res["type"] == "PeerLostError", res
        assert LOST_RANK_2.search(res["message"]), res
        assert res["seconds"] < 5, res
    assert not outcomes[2][0]  # the killed rank left no result


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_hung_peer_times_out_at_the_deadline(transport: str) -> None:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-test-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            3, "error_workers:peer_hangs", workdir=workdir, env={"PYTFCOMM_TRANSPORT": transport}
        )
        # The stopped rank is killed as soon as the others are done.
        outcomes = collect_survivors(procs, results, workdir, skip=2)
    for r in range(2):
        ok, res = outcomes[r]
        assert ok, res
        assert res["type"] == "CommTimeoutError", res
        assert LOST_RANK_2.search(res["message"]), res
        assert 1.5 < res["seconds"] < 10, res
