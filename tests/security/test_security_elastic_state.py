"""hvd.elastic's committed state (PYTFCOMM_ELASTIC_DIR): only a file of this user's,
that group and others cannot write, not a symbolic link, in such a directory, is ever
unpickled; anything else is a ConfigError naming the path and the rule
(docs/security.md, "Files pytfcomm trusts")."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest
from _harness import run_ranks

pytest.importorskip("tensorflow")

NOBODY = 65534
STATE = "state0.pkl"  # the first State a process makes


class _Evil:
    """Unpickled, it creates ``path``: what a planted state file would run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def _plant(folder: Path, marker: Path, case: str) -> Path:
    """A state file an attacker could have put in ``folder``, as ``case`` says."""
    payload = pickle.dumps(_Evil(str(marker)))
    target = folder / STATE
    if case == "symlink":  # a link to a pickle of this user's elsewhere
        elsewhere = folder.parent / "elsewhere.pkl"
        elsewhere.write_bytes(payload)
        elsewhere.chmod(0o600)
        target.symlink_to(elsewhere)
        return target
    target.write_bytes(payload)
    target.chmod(0o600)
    if case == "other_owner":
        os.chown(target, NOBODY, NOBODY)
    elif case == "group_writable":
        target.chmod(0o620)
    elif case == "world_writable":
        target.chmod(0o606)
    elif case == "shared_dir":  # the file is fine, the directory is not
        folder.chmod(0o1777)
    return target


WORDS = {
    "other_owner": f"is owned by uid {NOBODY}, not by this process's user (uid 0)",
    "group_writable": "is writable by group or others (mode 0620)",
    "world_writable": "is writable by group or others (mode 0606)",
    "symlink": "is a symbolic link",
    "shared_dir": "is writable by group or others (mode 1777)",
}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
@pytest.mark.parametrize("case", list(WORDS))
def test_planted_state_is_refused_not_unpickled(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "elastic"
    folder.mkdir(mode=0o700)
    marker = tmp_path / "ran"
    target = _plant(folder, marker, case)
    env = {"PYTFCOMM_ELASTIC_DIR": str(folder), "PYTFCOMM_RESTART_COUNT": "1"}
    out = run_ranks(
        2, "security_object_workers:elastic_resume", env=env, allow_failure=True, timeout=180
    )
    assert not marker.exists(), f"the planted pickle ran ({case})"
    ok, error = out[0]
    assert not ok and "ConfigError" in error, out
    named = str(folder) if case == "shared_dir" else str(target)
    assert named in error and WORDS[case] in error, error
    assert "a pickle runs code when loaded" in error, error


def test_commit_is_private_and_resumes(tmp_path: Path) -> None:
    """What rank 0 commits is a 0600 file of this user's, and a restart resumes it."""
    folder = tmp_path / "elastic"  # made by the commit, mode 0700
    env = {"PYTFCOMM_ELASTIC_DIR": str(folder)}
    assert run_ranks(2, "security_object_workers:elastic_commit", 7, env=env) == [7, 7]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / STATE).stat().st_mode) == 0o600
    assert [p.name for p in folder.iterdir()] == [STATE]  # no temporary left behind
    env["PYTFCOMM_RESTART_COUNT"] = "1"
    assert run_ranks(2, "security_object_workers:elastic_resume", env=env) == [7, 7]
