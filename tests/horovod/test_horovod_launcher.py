"""pytfcomm-run also sets Horovod's rank variables (HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytfcomm._launch import hosts as hosts_mod
from pytfcomm._launch import plan as plan_mod

LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")
NAMES = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


def _horovod(env: dict[str, str]) -> tuple[int, ...]:
    return tuple(int(env[f"HOROVOD_{n}"]) for n in NAMES)


def test_plan_sets_horovod_variables_on_every_host() -> None:
    placed = hosts_mod.place(hosts_mod.parse_host_list("node1:2,node2:2,node3:1"), None)
    plan = plan_mod.make_plan(placed, port=29500, bind=None)
    # (rank, size, local rank, local size, cross rank, cross size), as Horovod defines them:
    # cross rank/size count the hosts that have a rank with this local rank.
    assert [_horovod(e) for e in plan.envs] == [
        (0, 5, 0, 2, 0, 3),
        (1, 5, 1, 2, 0, 2),
        (2, 5, 0, 2, 1, 3),
        (3, 5, 1, 2, 1, 2),
        (4, 5, 0, 1, 2, 3),
    ]
    for e in plan.envs:
        assert e["HOROVOD_RANK"] == e["PYTFCOMM_RANK"]


def test_stale_horovod_variables_are_replaced() -> None:
    assert "HOROVOD_RANK" in plan_mod.RANK_VARS
    assert "HOROVOD_RANK" not in plan_mod.local_env({"HOROVOD_RANK": "7", "X": "1"})


def test_launched_ranks_see_horovod_variables(tmp_path: Path) -> None:
    script = (
        "import json, os, sys; r = os.environ['PYTFCOMM_RANK']; "
        "open(sys.argv[1] + '/rank' + r + '.json', 'w').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('HOROVOD_')}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTFCOMM_", "HOROVOD_"))}
    env["HOROVOD_RANK"] = "99"  # stale: the launcher's value wins
    res = subprocess.run(
        [str(LAUNCHER), "-np", "3", sys.executable, "-c", script, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr.decode()
    views = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    assert [_horovod(v) for v in views] == [(r, 3, r, 3, 0, 1) for r in range(3)]
