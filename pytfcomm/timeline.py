"""Reading and merging PYTFCOMM_TIMELINE files (docs/timeline.md).

Each rank writes its own Chrome-trace JSON file. ``merge`` puts several into
one file that chrome://tracing or ui.perfetto.dev shows with one process per
rank. Files cut short by a crash (no closing ``]}``) are read up to their
last complete event. Inputs must be regular files of at most
:data:`MAX_INPUT_BYTES`; anything that is not a timeline raises
:class:`~pytfcomm.InvalidArgumentError` naming the file. The merged file is
written to a new file (mode 0600) renamed over ``out``: a symbolic link at
``out`` is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ._owned_file import read_bounded
from .errors import InvalidArgumentError

__all__ = ["MAX_INPUT_BYTES", "load_events", "merge"]

MAX_INPUT_BYTES = 1 << 30
"""The largest timeline file ``load_events`` reads (1 GiB)."""

# How every file a rank writes begins (csrc/observe/timeline.cc, write_head).
_HEAD = '{"traceEvents":['


def _read(path: str | Path) -> str:
    """The text of the regular file ``path``, at most MAX_INPUT_BYTES."""
    try:
        # O_NONBLOCK: a FIFO is refused below, not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot open it ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgumentError(
                f"{path}: not a regular file; give the timeline files the ranks wrote"
            )
        too_big = InvalidArgumentError(
            f"{path}: larger than {MAX_INPUT_BYTES} bytes, the most a timeline file may "
            "have here: is it a timeline? (split the run into shorter timelines)"
        )
        if st.st_size > MAX_INPUT_BYTES:
            raise too_big
        data = read_bounded(fd, MAX_INPUT_BYTES)
    finally:
        os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise too_big
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{path}: not a timeline (not UTF-8 text)") from None


def _events(path: str | Path, events: object) -> list[dict]:
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise InvalidArgumentError(
            f"{path}: not a timeline (its traceEvents is not a list of event objects)"
        )
    return events


def load_events(path: str | Path) -> list[dict]:
    """The events of one timeline file, repairing a torn end (one event per line).

    :class:`InvalidArgumentError` naming ``path`` when it cannot be read, is not a
    regular file, is larger than :data:`MAX_INPUT_BYTES` or is not a timeline.
    """
    text = _read(path)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if not text.startswith(_HEAD):
            # JSONDecodeError has a position; other ValueErrors (an integer longer than
            # sys.get_int_max_str_digits()) only their text; RecursionError neither.
            where = ""
            if isinstance(exc, json.JSONDecodeError):
                where = f": {exc.msg} at line {exc.lineno}"
            elif isinstance(exc, ValueError):
                where = f": {exc}"
            raise InvalidArgumentError(
                f"{path}: not a timeline (not JSON{where}, and it does not begin as a "
                "timeline file does)"
            ) from None
    else:
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            raise InvalidArgumentError(
                f"{path}: not a timeline (JSON without a traceEvents list; give the files "
                "PYTFCOMM_TIMELINE wrote)"
            )
        return _events(path, doc["traceEvents"])
    events = []  # a file a crash cut short
    for line in text.splitlines()[1:]:
        line = line.strip().rstrip(",")
        if not line.startswith("{"):
            break  # the closing text, or garbage after a crash
        try:
            events.append(json.loads(line))
        except (ValueError, RecursionError):
            break  # the event a crash interrupted
    return _events(path, events)


def merge(paths: Sequence[str | Path], out: str | Path) -> int:
    """Write the events of every file in ``paths`` into ``out``; returns the event count.

    Every input is read before ``out`` is touched. ``out`` is replaced atomically by a
    new file of mode 0600 (a link at ``out`` is replaced, not followed); OSError when
    its directory cannot be written.
    """
    events: list[dict] = []
    for p in paths:
        events.extend(load_events(p))
    doc = {"traceEvents": events, "displayTimeUnit": "ns"}
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.fspath(out)) or ".", prefix=".merge-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return len(events)
