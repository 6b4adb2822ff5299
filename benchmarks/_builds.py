"""The builds of pytfcomm a before/after comparison runs: each side of ``benchmarks/ab.py``.

A side is one of:

* ``installed``: the pytfcomm installed in this interpreter's environment;
* a directory that holds a ``pytfcomm/`` package (``pip install --target DIR`` of a build);
* a git revision of this repository (``HEAD``, ``main``, ``fda66c4``, ``HEAD~3``): its
  committed tree is exported to ``CACHE/<commit>/src`` and installed into
  ``CACHE/<commit>/site`` with ``pip install --no-deps --no-build-isolation --target``, once
  per commit; the build directory stays in ``src/build``, so a rerun costs nothing. The
  working tree's uncommitted changes are not part of a revision: to measure them, install
  them (``installed``) or into a directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks._registry import REPO_ROOT

INSTALLED = "installed"
DEFAULT_CACHE = os.path.join(REPO_ROOT, "build", "ab")
BUILD_TIMEOUT_S = 3600  # a full C++ build on a small, busy machine
_DONE = ".ab-installed"  # written into site/ once pip install succeeded


@dataclass(frozen=True)
class Build:
    """One side: what was asked for, what it is, and the PYTHONPATH entry that puts its
    pytfcomm first for the workers ("" for the installed one)."""

    given: str
    label: str  # the commit, the directory, or "installed"
    pythonpath: str


def _git(*args: str) -> str:
    out = subprocess.run(
        ["git", "-C", REPO_ROOT, *args], capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise ValueError(out.stderr.strip() or f"git {' '.join(args)} failed")
    return out.stdout.strip()


def _say(msg: str) -> None:
    print(f"[ab] {msg}", file=sys.stderr, flush=True)


def _install_commit(commit: str, cache: str) -> str:
    """``CACHE/<commit>/site`` with that commit's pytfcomm installed in it (built if new)."""
    root = Path(cache) / commit
    site, src = root / "site", root / "src"
    if (site / _DONE).exists():
        return str(site)
    if not (src / "pyproject.toml").exists():
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        _say(f"exporting {commit[:12]} to {src}")
        tar = root / "src.tar"
        _git("archive", "--format=tar", "-o", str(tar), commit)
        subprocess.run(["tar", "-xf", str(tar), "-C", str(src)], check=True, timeout=600)
        tar.unlink()
    shutil.rmtree(site, ignore_errors=True)
    _say(f"building {commit[:12]} into {site} (first time for this commit: minutes)")
    log = root / "build.log"
    with open(log, "wb") as out:
        res = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
             "--disable-pip-version-check", "-q", "--target", str(site), str(src)],
            stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
    if res.returncode != 0 or not (site / "pytfcomm").is_dir():
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"installing {commit[:12]} failed (whole log: {log}):\n{tail}")
    (site / _DONE).write_text(commit + "\n")
    return str(site)


def _commit(given: str) -> str:
    try:
        return _git("rev-parse", "--verify", "--quiet", given + "^{commit}")
    except ValueError:
        raise ValueError(
            f"{given!r} is not {INSTALLED!r}, a directory holding pytfcomm/, nor a git "
            "revision of this repository"
        ) from None


def resolve(sides: list[str], cache: str = DEFAULT_CACHE) -> list[Build]:
    """The builds ``sides`` name (see the module doc), each new commit built first. Every
    revision is read before anything is built: ``HEAD`` twice is one commit even when a
    commit lands during the build. ``ValueError`` when a side is neither ``installed``, a
    directory with ``pytfcomm/`` nor a revision of this repository; ``RuntimeError`` when
    building one failed."""
    found: list[tuple[str, str | None]] = []  # (given, commit or None)
    for given in sides:
        if given == INSTALLED:
            found.append((given, None))
        elif os.path.isdir(given):
            if not os.path.isdir(os.path.join(given, "pytfcomm")):
                raise ValueError(f"{given}: a directory without a pytfcomm/ package in it")
            found.append((given, None))
        else:
            found.append((given, _commit(given)))
    builds = []
    for given, commit in found:
        if commit is not None:
            builds.append(Build(given, commit[:12], _install_commit(commit, cache)))
        elif given == INSTALLED:
            builds.append(Build(given, INSTALLED, ""))
        else:
            path = os.path.abspath(given)
            builds.append(Build(given, path, path))
    return builds
