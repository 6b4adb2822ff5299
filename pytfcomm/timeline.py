"""Reading and merging PYTFCOMM_TIMELINE files (docs/timeline.md).

Each rank writes its own Chrome-trace JSON file. ``merge`` puts several into
one file that chrome://tracing or ui.perfetto.dev shows with one process per
rank. Files cut short by a crash (no closing ``]}``) are read up to their
last complete event.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["load_events", "merge"]


def load_events(path: str | Path) -> list[dict]:
    """The events of one timeline file, repairing a torn end (one event per line)."""
    text = Path(path).read_text()
    try:
        return list(json.loads(text)["traceEvents"])
    except (ValueError, KeyError):
        pass
    events = []
    for line in text.splitlines()[1:]:
        line = line.strip().rstrip(",")
        if not line.startswith("{"):
            break  # the closing text, or garbage after a crash
        try:
            events.append(json.loads(line))
        except ValueError:
            break  # the event a crash interrupted
    return events


def merge(paths: list[str | Path], out: str | Path) -> int:
    """Write the events of every file in ``paths`` into ``out``; returns the event count."""
    events: list[dict] = []
    for p in paths:
        events.extend(load_events(p))
    doc = {"traceEvents": events, "displayTimeUnit": "ns"}
    Path(out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return len(events)
