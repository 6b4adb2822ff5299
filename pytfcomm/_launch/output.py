"""Relay the ranks' output, one whole line at a time, prefixed with the rank.

A rank's stdout goes to the launcher's stdout and its stderr to the launcher's stderr,
each line as ``[<rank>] <line>``. Bytes are relayed as they are (no decoding), so binary
output cannot break the launcher. A line is written with one ``write`` under no
contention (one thread relays everything), so lines of different ranks never mix. A
line longer than ``MAX_LINE`` bytes is cut into pieces; a last line without a newline
gets one when the rank closes the stream.
"""

from __future__ import annotations

import os
import selectors
import sys
import time
from pathlib import Path
from typing import BinaryIO, Literal

__all__ = ["MAX_LINE", "OutputRelay"]

MAX_LINE = 64 * 1024


class _Stream:
    def __init__(self, rank: int, sink: BinaryIO, prefix: bytes, log: BinaryIO | None) -> None:
        self.rank = rank
        self.sink = sink
        self.prefix = prefix
        self.log = log
        self.pending = b""


class OutputRelay:
    """Reads every rank's pipes with one selector and writes prefixed lines."""

    def __init__(
        self,
        prefix: bool = True,
        output_dir: str | None = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        append: bool = False,
    ) -> None:
        self._prefix = prefix
        # append: a restarted job adds to the logs
        self._mode: Literal["ab", "wb"] = "ab" if append else "wb"
        self._dir = Path(output_dir) if output_dir else None
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
        self._out = stdout if stdout is not None else sys.stdout.buffer
        self._err = stderr if stderr is not None else sys.stderr.buffer
        self._sel = selectors.DefaultSelector()
        self._broken: set[int] = set()

    def add(self, rank: int, fd: int, is_stderr: bool) -> None:
        """Relay the pipe ``fd`` (the relay closes it at EOF)."""
        sink = self._err if is_stderr else self._out
        log = None
        if self._dir is not None:
            name = f"rank.{rank}.{'stderr' if is_stderr else 'stdout'}"
            log = open(self._dir / name, self._mode)
        prefix = f"[{rank}] ".encode() if self._prefix else b""
        self._sel.register(fd, selectors.EVENT_READ, _Stream(rank, sink, prefix, log))

    @property
    def open_streams(self) -> int:
        """Pipes not yet at end of file."""
        return len(self._sel.get_map())

    def pump(self, timeout: float) -> None:
        """Relay whatever arrives within ``timeout`` seconds."""
        if not self._sel.get_map():
            time.sleep(timeout)
            return
        for key, _ in self._sel.select(timeout):
            stream: _Stream = key.data
            try:
                data = os.read(key.fd, 65536)
            except OSError:
                data = b""
            if data:
                self._feed(stream, data)
            else:
                self._close(key.fd, stream)

    def close(self) -> None:
        """Flush partial lines and close every pipe still open."""
        for key in list(self._sel.get_map().values()):
            self._close(key.fd, key.data)
        self._sel.close()

    def _feed(self, stream: _Stream, data: bytes) -> None:
        if stream.log is not None:
            stream.log.write(data)
        buf = stream.pending + data
        start = 0
        while True:
            end = buf.find(b"\n", start, start + MAX_LINE)
            if end >= 0:
                self._emit(stream, buf[start : end + 1])
                start = end + 1
            elif len(buf) - start >= MAX_LINE:
                self._emit(stream, buf[start : start + MAX_LINE] + b"\n")
                start += MAX_LINE
            else:
                break
        stream.pending = buf[start:]

    def _close(self, fd: int, stream: _Stream) -> None:
        if stream.pending:
            self._emit(stream, stream.pending + b"\n")
            stream.pending = b""
        if stream.log is not None:
            stream.log.close()
        self._sel.unregister(fd)
        os.close(fd)

    def _emit(self, stream: _Stream, line: bytes) -> None:
        sink_id = id(stream.sink)
        if sink_id in self._broken:
            return
        try:
            stream.sink.write(stream.prefix + line)
            stream.sink.flush()
        except (BrokenPipeError, ValueError, OSError):
            # The reader of our output went away: keep supervising, drop output.
            self._broken.add(sink_id)
