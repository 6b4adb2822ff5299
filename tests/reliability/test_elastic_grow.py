"""pytfcomm-run --elastic --max-np B --host-discovery-script PATH: workers join at commits.

Two ranks run tests/workers/elastic_grow_workers.py (or the hvd script) through
pytfcomm-run (127.0.0.1 only, free ports, the launcher bounded and killed with its
process group on failure). The discovery script is a shell script printing a file the
test rewrites. When it says 3 slots, the launcher starts a joiner; the ranks admit it at
their next commit point (rank 0 asks the launcher, its answer is broadcast) and all three
end with the result of a reference computed for that membership schedule, bitwise, the
original ranks in their first processes. The time from the rewrite to the first step
with 3 ranks is printed (docs/elastic.md quotes it), never asserted.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, _env, launch, started, wait_files
from _paths import WORKERS

import pytfcomm.elastic as pe
from pytfcomm._elastic_client import ask
from pytfcomm._launch.discovery import HostDiscovery
from pytfcomm._launch.hosts import Host
from pytfcomm._launch.membership import MembershipService
from pytfcomm._launch.procs import RankSpec

WORKER = str(WORKERS / "elastic_grow_workers.py")
GROW = ("--elastic", "--min-np", "2", "--bind-to", "none")


def _discovery(tmp_path: Path, slots: str, body: str | None = None) -> Path:
    """An executable printing ``tmp_path/slots`` (or running ``body``)."""
    _set_slots(tmp_path, slots)
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\n" + (body or f"cat '{tmp_path / 'slots'}'\n"))
    script.chmod(0o755)
    return script


def _set_slots(tmp_path: Path, slots: str) -> None:
    tmp = tmp_path / "slots.tmp"
    tmp.write_text(slots + "\n")
    os.replace(tmp, tmp_path / "slots")  # the script never reads half a file


def _schedule(members_per_step: list[tuple[int, ...]]) -> np.ndarray:
    """``w`` after one step per entry, each among the workers it names."""
    w = np.zeros(4, np.float64)
    for step, members in enumerate(members_per_step):
        g = [(i + 1) * (step + 1) * np.arange(4, dtype=np.float64) for i in members]
        w = w - 0.01 * (np.sum(g, axis=0) / len(members))
    return w


def _result(out: Path, worker: int) -> dict:
    return json.loads((out / f"result{worker}.json").read_text())


def _starts(out: Path, worker: int) -> list[dict]:
    return [json.loads(line) for line in (out / f"starts{worker}.jsonl").read_text().splitlines()]


def _check_grown(out: Path, text: str) -> int:
    """Workers 0 and 1 ran all along in their first processes, worker 2 joined at one
    step J on every rank; all end with the reference ``w``. Returns J."""
    results = [_result(out, i) for i in (0, 1, 2)]
    joined = results[2]["since"]
    assert all(r["since"] == joined for r in results), [r["since"] for r in results]
    steps = len(results[0]["seen"])
    for i, res in enumerate(results):
        assert _starts(out, i) == [{"pid": res["pid"], "joiner": i == 2}], _starts(out, i)
        assert res["joiner"] is (i == 2) and res["epoch"] == 1
        want_seen = [[s, i, 2] for s in range(joined)] + [[s, i, 3] for s in range(joined, steps)]
        assert res["seen"] == (want_seen if i < 2 else want_seen[joined:]), res["seen"]
    want = _schedule([(0, 1)] * joined + [(0, 1, 2)] * (steps - joined))
    assert all(r["w"] == [x.hex() for x in want] for r in results)
    assert "epoch 1: 3 rank(s) go on (started as 0, 1, 2); lost: none; joined: 2" in text, text
    return joined


def test_a_joiner_is_admitted_at_a_commit(tmp_path: Path) -> None:
    script = _discovery(tmp_path, "localhost:2")
    args = ("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script))
    env = _env(PYTFCOMM_TRANSPORT="tcp")
    with started(*args, PY, WORKER, "grow", str(tmp_path), "3", "10", "5",
                 cwd=tmp_path, env=env) as proc:  # fmt: skip
        wait_files([tmp_path / "step5"], timeout=90)
        t_rewrite = time.time()
        _set_slots(tmp_path, "localhost:3")
        _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "host discovery: 3 slot(s) on this machine: target 3" in text, text[-3000:]
    assert "starting joiner(s) 2; they join at the next commit point" in text, text[-3000:]
    joined = _check_grown(tmp_path, text)
    assert joined >= 5
    took = _result(tmp_path, 0)["full_at"] - t_rewrite
    t0, t2 = _result(tmp_path, 0)["times"], _result(tmp_path, 2)["times"]
    print(
        f"discovery file rewritten -> first step with 3 ranks: {took:.2f} s (step {joined}); "
        f"joiner start -> admitted {t2['joined'] - t2['started']:.2f} s; rank 0 paused "
        f"{t0['next_step'] - t0['interrupted']:.3f} s (hosts_updated -> next step done)"
    )


def test_max_np_caps_the_growth(tmp_path: Path) -> None:
    # The script offers 5 slots from the start: one joiner (3 = --max-np), never more,
    # though the job runs on for more than a discovery period after it joined.
    script = _discovery(tmp_path, "localhost:5")
    res = launch("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script),
                 PY, WORKER, "grow", str(tmp_path), "3", "10", "80",
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp"), timeout=120)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert "5 slot(s) on this machine, capped by --max-np 3: target 3" in text, text[-3000:]
    assert text.count("starting joiner(s)") == 1 and "starting joiner(s) 2;" in text, text
    _check_grown(tmp_path, text)
    assert not (tmp_path / "starts3.jsonl").exists()


def test_a_joiner_arriving_during_a_commit_is_admitted_at_the_next(tmp_path: Path) -> None:
    # Rank 0 asked the launcher (no joiner yet) and waits in the broadcast of its answer
    # while rank 1 lingers in the commit; the joiner checks in just then. No rank goes
    # by its own view: all go on with 2, and admit it at the next commit point.
    script = _discovery(tmp_path, "localhost:3")
    args = ("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script))
    with started(*args, PY, WORKER, "race", str(tmp_path), "3", "10", "5",
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp")) as proc:  # fmt: skip
        wait_files([tmp_path / "in_commit"], timeout=90)
        (tmp_path / "let_join").write_text("")
        _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    raced = _result(tmp_path, 1)["raced"]
    assert (tmp_path / f"polled{raced}").read_text() == "False"
    assert (tmp_path / f"polled{raced + 1}").read_text() == "True"
    assert _check_grown(tmp_path, text) == raced + 1


@pytest.mark.parametrize(
    ("body", "warning"),
    [
        ("echo 'no such thing' >&2; exit 3\n", "exited with code 3: no such thing"),
        ("echo 'localhost:lots'\n", "'localhost:lots': slots 'lots' must be a positive"),
        ("echo localhost:2; echo node-x.invalid:4\n", "'node-x.invalid' (line 2) is not this"),
    ],
    ids=["fails", "garbage", "other-host"],
)
def test_a_bad_discovery_script_warns_and_the_job_goes_on(
    tmp_path: Path, body: str, warning: str
) -> None:
    script = _discovery(tmp_path, "", body)
    res = launch("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script),
                 PY, WORKER, "grow", str(tmp_path), "2", "30", "0",
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp"), timeout=120)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert warning in text, text[-3000:]
    assert "starting joiner" not in text, text[-3000:]
    for i in (0, 1):
        res_i = _result(tmp_path, i)
        assert res_i["epoch"] == 0 and {s[2] for s in res_i["seen"]} == {2}


def test_a_joiner_that_dies_before_its_admission_stops_growth(tmp_path: Path) -> None:
    script = _discovery(tmp_path, "localhost:3")
    res = launch("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script),
                 PY, WORKER, "joiner-dies", str(tmp_path), "2", "150", "0",
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp"), timeout=120)  # fmt: skip
    text = res.stderr.decode(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert "joiner 2 exited (3) before its admission: no more joiners start" in text, text
    assert text.count("starting joiner(s)") == 1, text[-3000:]
    for i in (0, 1):
        res_i = _result(tmp_path, i)
        assert res_i["epoch"] == 0 and {s[2] for s in res_i["seen"]} == {2}


def test_bad_grow_options_are_refused(tmp_path: Path) -> None:
    script = _discovery(tmp_path, "localhost:2")
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\necho localhost\n")
    grow = ("--elastic", "--host-discovery-script")
    cases = [
        (("--max-np", "3"), b"--max-np needs --elastic"),
        (("--host-discovery-script", str(script)), b"--host-discovery-script needs --elastic"),
        (("--elastic", "--max-np", "3"), b"--max-np needs --host-discovery-script PATH"),
        ((*grow, str(script)), b"needs --max-np B"),
        (
            (*grow, str(script), "--min-np", "2", "--max-np", "1"),
            b"--max-np 1 is less than --min-np 2",
        ),
        ((*grow, str(script), "-np", "3", "--max-np", "2"), b"is less than the 3 rank(s) started"),
        ((*grow, str(tmp_path / "none"), "--max-np", "2"), b"no such file"),
        ((*grow, str(plain), "--max-np", "2"), b"is not executable"),
    ]
    for opts, message in cases:
        res = launch(*opts, PY, "-c", "pass", cwd=tmp_path)
        assert res.returncode == 2 and message in res.stderr, (opts, res.stderr)


def test_a_hanging_discovery_script_is_killed_and_warned_about(tmp_path: Path) -> None:
    # In-process (no job): one poll of a script that never ends is bounded by its timeout.
    script = _discovery(tmp_path, "", "echo localhost:3; sleep 600\n")
    said: list[str] = []
    disc = HostDiscovery(str(script), max_np=3, say=said.append, timeout=0.5)
    t0 = time.monotonic()
    disc.poll()
    assert time.monotonic() - t0 < 10
    assert disc.target() is None and "did not finish within 0.5 s (killed)" in said[-1], said
    _set_slots(tmp_path, "localhost:2")
    disc.script = str(_discovery(tmp_path, "localhost:2"))
    disc.poll()
    assert disc.target() == 2, said
    # The launcher's exit (Ctrl-C included) never waits for a run in progress.
    hang = HostDiscovery(str(_discovery(tmp_path, "", "sleep 600\n")), max_np=3, say=said.append)
    hang.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    hang.close()
    assert time.monotonic() - t0 < 3 and not hang._thread.is_alive()


class _Target:
    def __init__(self, n: int) -> None:
        self.n = n

    def hosts(self) -> list[Host]:
        return [Host("localhost", "localhost", self.n, True)]


def _service(workers: list[int], target: int) -> tuple[MembershipService, list[str]]:
    said: list[str] = []
    svc = MembershipService(
        "127.0.0.1", "s" * 32, workers, min_np=1, window=5.0, say=said.append,
        grow=_Target(target), make_joiner=lambda w, _h: RankSpec(w, "localhost", ["true"], {}),
        max_np=target,
    )  # fmt: skip
    return svc, said


def test_a_loss_while_a_joiner_waits_admits_it_with_the_survivors() -> None:
    # In-process: joiner 2 waits; rank 1 is lost before any commit point; rank 0's
    # re-forming (after the loss) takes the joiner in: [0, 2], ranks 0 and 1 of 2.
    svc, said = _service([0, 1], 3)
    try:
        assert [s.rank for s in svc.joiners()] == [2]
        got: dict[int, dict] = {}
        body = {"op": "join", "id": 2, "epoch": -1, "wait": 30}
        joiner = threading.Thread(
            target=lambda: got.__setitem__(2, ask(svc.addr, "s" * 32, body, 45, "admission"))
        )
        joiner.start()
        deadline = time.monotonic() + 20
        while not pe._poll(svc.addr, "s" * 32, 0, 0, 10):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert svc.exited(1, -9)  # SIGKILLed: the job goes on (min-np 1)
        got[0] = pe._ask(svc.addr, "s" * 32, 0, 0, 30)
        joiner.join(60)
        assert (got[0]["rank"], got[0]["size"], got[2]["rank"], got[2]["size"]) == (0, 2, 1, 2)
        assert got[0]["addr"] == got[2]["addr"] and svc.members == [0, 2]
        assert "lost: 1; joined: 2" in said[-1], said
        # A lost slot is filled again by a new joiner (a new id), while the target says so.
        assert svc.exited(1, -9) and [s.rank for s in svc.joiners()] == [3]
        # A joiner that fails before its admission stops growth for the run.
        assert svc.exited(3, 1) and svc.joiners() == []
        assert "joiner 3 exited (1) before its admission" in said[-1], said
    finally:
        svc.close()


def test_no_joiner_starts_once_the_job_is_finishing() -> None:
    svc, _ = _service([0, 1, 2], 3)
    try:
        assert svc.joiners() == [] and svc.exited(2, 0)  # a member is done
        assert svc.joiners() == []  # its slot is not filled again
    finally:
        svc.close()


def test_hvd_elastic_run_admits_a_joiner_with_the_synced_state(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    script = _discovery(tmp_path, "localhost:2")
    args = ("-np", "2", *GROW, "--max-np", "3", "--host-discovery-script", str(script))
    with started(*args, PY, str(WORKERS / "elastic_grow_hvd_script.py"), str(tmp_path),
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp")) as proc:  # fmt: skip
        wait_files([tmp_path / "step5"], timeout=180)
        t_rewrite = time.time()
        _set_slots(tmp_path, "localhost:3")
        _, err = proc.communicate(timeout=240)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "joined: 2" in text and "restarting" not in text, text[-3000:]
    out = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1, 2)]
    joined = out[2]["starts"][0][0]
    steps = len(out[0]["seen"])
    w = np.zeros(4, np.float32)
    at_join = None
    for step in range(steps):  # float32, as TF computes it
        if step == joined:
            at_join = w.copy()
        members = (0, 1) if step < joined else (0, 1, 2)
        g = [np.arange(4, dtype=np.float32) * (step + 1) * (i + 1) for i in members]
        w = w - np.float32(0.01) * (np.sum(g, axis=0) / np.float32(len(members)))
    for i, o in enumerate(out):
        # one process each; the originals' func ran from 0, then again from the commit
        assert len(_starts(tmp_path, i)) == 1
        if i < 2:
            assert o["starts"] == [[0, i, 2], [joined, i, 3]], o["starts"]
            assert o["resets"] == [[joined, i, 3]], o["resets"]
        else:
            assert o["starts"] == [[joined, 2, 3]] and o["resets"] == [], o
            # the joiner got rank 0's committed state before its first step
            np.testing.assert_allclose(o["synced_w"], at_join, rtol=1e-6)
        np.testing.assert_allclose(o["w"], w, rtol=1e-6)
        assert o["seen"][-1] == [steps - 1, i, 3]
    took = out[0]["full_at"] - t_rewrite
    print(f"hvd: discovery file rewritten -> first step with 3 ranks: {took:.2f} s")
