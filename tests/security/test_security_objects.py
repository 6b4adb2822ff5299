"""hvd.broadcast_object / allgather_object under a job secret: a payload altered or
replayed on the way is refused (AuthenticationError) and never unpickled
(docs/security.md, "Objects between ranks")."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from _harness import run_ranks

pytest.importorskip("tensorflow")

SECRET = {"PYTFCOMM_SECRET": "objects-" + "5" * 32}


class _Evil:
    """Unpickled, it creates ``path``: what an attacker's payload would run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def _evil(marker: Path) -> bytes:
    return pickle.dumps(_Evil(str(marker)))


def test_altered_or_replayed_broadcast_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    out = run_ranks(
        2, "security_object_workers:tampered_broadcast", _evil(marker), env=SECRET, timeout=180
    )
    assert not marker.exists(), "the injected pickle ran"
    root, rank1 = out
    assert root["first"] == rank1["first"] == 1
    for what in ("injected", "replayed"):
        error = rank1[what].get("error", "")
        assert error.startswith("AuthenticationError: broadcast_object: the payload from rank 0 "
                                "failed its integrity check"), (what, rank1[what])  # fmt: skip
        assert "not unpickled" in error and "docs/security.md" in error
        assert "value" in root[what]  # the sender is not the one told
    assert root["honest"] == rank1["honest"] == 4  # the objects that arrive intact still do


def test_altered_allgather_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    out = run_ranks(
        2, "security_object_workers:tampered_allgather", _evil(marker), env=SECRET, timeout=180
    )
    assert not marker.exists(), "the injected pickle ran"
    error = out[0]["injected"].get("error", "")
    assert error.startswith("AuthenticationError: allgather_object: the payload from rank 1"), out
    assert out[0]["honest"] == out[1]["honest"] == [0, 1]
