"""benchmarks/tf_multiworker.py --repeat: the ratios' min/median/max over runs (the
numbers behind "N of N runs" claims), computed from canned results, no TF needed."""

from __future__ import annotations

import sys

import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import tf_multiworker as tm


def _run(reduce_ms: float, fit: float, ref_reduce: float = 20.0) -> dict:
    row = {"reduce-16MiB": reduce_ms, "resnet50-grads": 100.0, "train": 5000.0, "keras-fit": fit}
    ref = {"reduce-16MiB": ref_reduce, "resnet50-grads": 200.0, "train": 1000.0, "keras-fit": 500.0}
    hvd = {"reduce-16MiB": 1.0, "resnet50-grads": 50.0, "train": 8000.0, "keras-fit": 8000.0}
    return {"pytfcomm-mwms": row, "tf-mwms-ring": ref, "pytfcomm-horovod": hvd}


def test_ratio_directions() -> None:
    res = _run(2.0, 4000.0)
    assert tm._ratio(res, "pytfcomm-mwms", "reduce-16MiB") == pytest.approx(10.0)  # time
    assert tm._ratio(res, "pytfcomm-mwms", "keras-fit") == pytest.approx(8.0)  # rate
    assert tm._ratio(res, "pytfcomm-mwms", "keras-fit", "pytfcomm-horovod") == 0.5
    assert tm._ratio(res, "tf-mwms-ring", "train") is None
    assert tm._ratio({"pytfcomm-mwms": {"error": "x"}}, "pytfcomm-mwms", "train") is None


def test_spread_over_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(2.0, 4000.0), _run(4.0, 4000.0), _run(1.0, 6000.0)]
    runs[1]["pytfcomm-mwms"]["keras-fit"] = "ValueError: failed"  # not counted
    tm._print_spread(runs)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| pytfcomm-mwms vs tf-mwms-ring"))
    cells = [c.strip() for c in line.split("|")[2:-1]]
    assert cells[tm.KEYS.index("reduce-16MiB")] == "5.00 / 10.00 / 20.00 (3)"  # 20 ms over 4, 2, 1
    assert cells[tm.KEYS.index("keras-fit")] == "8.00 / 10.00 / 12.00 (2)"
    hvd = next(x for x in out.splitlines() if "pytfcomm-mwms vs pytfcomm-horovod" in x)
    assert "0.50 / 0.62 / 0.75 (2)" in hvd


def test_tf_against_numpy_on_the_horovod_path(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(2.0, 4000.0), _run(2.0, 4000.0)]
    for res, (call, graph) in zip(runs, [(1.3, 1.05), (1.2, 1.0)], strict=True):
        res["pytfcomm-horovod"].update(
            {"reduce-16MiB": call, "reduce-16MiB-graph": graph, "reduce-16MiB-numpy": 1.0}
        )
    res["pytfcomm-mwms"]["reduce-16MiB-numpy"] = "-"  # no NumPy time: no ratio for it
    assert tm._tf_vs_numpy(runs[0]) == pytest.approx((1.3, 1.05))
    assert tm._tf_vs_numpy({"pytfcomm-horovod": {"reduce-16MiB": 1.0}}) is None
    tm._print_table(runs[0], 2, "")
    tm._print_spread(runs)
    out = capsys.readouterr().out
    assert "call per all-reduce 1.30x; per all-reduce inside one tf.function 1.05x\n" in out
    assert "1.20 / 1.25 / 1.30 (2); per all-reduce inside one tf.function 1.00 / 1.02 / 1.05" in out
    # TF's own call (an identity tf.function) has a column of its own, in ms.
    runs[0]["pytfcomm-horovod"]["tf-call-16MiB"] = 0.4
    tm._print_table(runs[0], 2, "")
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith("| pytfcomm-horovod |"))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[tm.KEYS.index("tf-call-16MiB")] == "400.00"
    # Every backend has one now, but it is context, not a contest: no ratio against RING.
    runs[0]["tf-mwms-ring"]["tf-call-16MiB"] = 0.5
    assert tm._ratio(runs[0], "pytfcomm-horovod", "tf-call-16MiB") is None


def test_interleaved_timing_alternates_and_divides_per_operation(monkeypatch) -> None:
    # A fake clock: each call advances it by its own cost, so the medians are exact.
    now = [0.0]
    monkeypatch.setattr(tm.time, "perf_counter", lambda: now[0])
    calls: list[str] = []

    def fn(name: str, cost: float):
        def call() -> None:
            calls.append(name)
            now[0] += cost

        return call

    got = tm.interleaved(
        {"tf": fn("tf", 3.0), "chain": fn("chain", 16.0), "numpy": fn("numpy", 2.0)},
        warmup=1,
        iters=3,
        per_call={"chain": 8},
    )
    assert calls == ["tf", "chain", "numpy"] * 4  # one of each per iteration, in turn
    assert got == {"tf": 3.0, "chain": 2.0, "numpy": 2.0}


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, "glibc.malloc.hugetlb=1"),
        ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
        ("glibc.malloc.hugetlb=0", None),
    ],
)
def test_workers_start_as_pytfcomm_run_starts_ranks(given: str | None, want: str | None) -> None:
    """The benchmark's workers get the GLIBC_TUNABLES that pytfcomm-run gives its ranks
    (tests/launch/test_launcher.py checks the launcher against the same values)."""
    environ = {} if given is None else {"GLIBC_TUNABLES": given}
    assert tm.malloc_hugepages(environ) == ({} if want is None else {"GLIBC_TUNABLES": want})


def test_tf_against_numpy_on_the_strategy_too(capsys: pytest.CaptureFixture[str]) -> None:
    """The strategy's row has its own NumPy yardstick (its own communicator), printed
    beside the Horovod-style path's, each from its own row."""
    runs = [_run(2.0, 4000.0), _run(3.0, 4000.0)]
    for res in runs:
        res["pytfcomm-mwms"].update({"reduce-16MiB-graph": 1.5, "reduce-16MiB-numpy": 1.0})
        res["pytfcomm-horovod"].update(
            {"reduce-16MiB": 1.1, "reduce-16MiB-graph": 0.9, "reduce-16MiB-numpy": 1.0}
        )
    assert tm._tf_vs_numpy(runs[0], "pytfcomm-mwms") == pytest.approx((2.0, 1.5))
    assert tm._tf_vs_numpy(runs[0]) == pytest.approx((1.1, 0.9))  # the Horovod-style path
    assert tm._tf_vs_numpy(runs[0], "tf-mwms-ring") is None  # RING has no NumPy time
    tm._print_table(runs[0], 2, "")
    out = capsys.readouterr().out
    assert "(pytfcomm-mwms, one communicator): one tf.function call per all-reduce 2.00x" in out
    assert "(pytfcomm-horovod, one communicator): one tf.function call per all-reduce 1.10x" in out
    tm._print_spread(runs)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("pytfcomm-mwms 16 MiB, TF time"))
    assert "call per all-reduce 2.00 / 2.50 / 3.00 (2)" in line
    assert "per all-reduce inside one tf.function 1.50 / 1.50 / 1.50 (2)" in line
