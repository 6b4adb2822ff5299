"""Refuse files over 1 MiB in git's index (scripts/lint.sh and the pre-commit hook).

    python scripts/check_large_files.py [--repo DIR]   # exit 1, naming each file, if one is

A file once committed stays in every clone for good, even after it is deleted. The
index is what the next commit records, so this checks the staged content, not the
working tree. Data that large is generated at run time (tests, benchmarks) or kept
out of git; a file that must be tracked at that size is listed in ALLOWED with the
reason. Exit status: 0 all within the limit, 1 a file over it, 2 git failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MAX_BYTES = 1 << 20

# path in the repository -> why it must be tracked at more than MAX_BYTES
ALLOWED: dict[str, str] = {}

_GITLINK = "160000"  # a submodule: a commit, not a file


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout


def staged_sizes(repo: Path) -> dict[str, int]:
    """Every file in the index of ``repo`` with the size of its staged content in bytes."""
    objects: list[tuple[str, str]] = []  # (object id, path)
    for entry in _git(repo, "ls-files", "--stage", "-z").split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, oid, _stage = meta.decode().split()
        if mode != _GITLINK:
            objects.append((oid, path.decode(errors="surrogateescape")))
    if not objects:
        return {}
    query = "".join(f"{oid}\n" for oid, _ in objects).encode()
    sizes = _git(repo, "cat-file", "--batch-check=%(objectsize)", stdin=query).split()
    if len(sizes) != len(objects):
        raise RuntimeError(f"git cat-file gave {len(sizes)} sizes for {len(objects)} files")
    return {path: int(size) for (_, path), size in zip(objects, sizes, strict=True)}


def too_large(
    sizes: dict[str, int], max_bytes: int = MAX_BYTES, allowed: dict[str, str] = ALLOWED
) -> list[str]:
    """The paths over ``max_bytes`` that ``allowed`` does not list, largest first."""
    big = [p for p, n in sizes.items() if n > max_bytes and p not in allowed]
    return sorted(big, key=lambda p: (-sizes[p], p))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("."), help="the repository (.)")
    args = parser.parse_args(argv)
    try:
        sizes = staged_sizes(args.repo)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"check_large_files: cannot list the files of {args.repo}: {exc}", file=sys.stderr)
        return 2
    big = too_large(sizes)
    for path in big:
        print(
            f"{path}: {sizes[path]} bytes, over the {MAX_BYTES}-byte limit for a tracked "
            "file: generate it at run time or keep it out of git (git rm --cached), or "
            "list it in ALLOWED of scripts/check_large_files.py with the reason",
            file=sys.stderr,
        )
    return 1 if big else 0


if __name__ == "__main__":
    sys.exit(main())
