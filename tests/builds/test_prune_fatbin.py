"""scripts/prune_fatbin.py: keeps the kept architecture's GPU code byte for byte,
zeroes the rest, and stops at a fatbin that runs past its section."""

from __future__ import annotations

import collections
import importlib.util
import struct

import pytest
from _paths import ROOT

SCRIPT = ROOT / "scripts" / "prune_fatbin.py"
spec = importlib.util.spec_from_file_location("prune_fatbin", SCRIPT)
prune_fatbin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prune_fatbin)


def _entry(kind: int, arch: int, payload: bytes) -> bytes:
    header = struct.pack("<HHIQ", kind, 0x101, 64, len(payload))
    header += struct.pack("<IIHHI", 0, 0, 0, 0, arch)  # ... architecture at byte 28
    return header.ljust(64, b"\0") + payload


def _fatbin(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", prune_fatbin.MAGIC, 1, 16, len(body)) + body


def test_only_the_kept_architecture_survives() -> None:
    sm75, sm90, ptx = b"\x75" * 40, b"\x90" * 48, b"\x12" * 24
    fat = _fatbin([_entry(2, 75, sm75), _entry(2, 90, sm90), _entry(1, 120, ptx)])
    buf = bytearray(b"\xee" * 8 + fat + b"\0" * 8 + fat)  # padding, two fatbins
    held: collections.Counter = collections.Counter()
    prune_fatbin.prune(buf, 0, len(buf), {90}, held)
    assert held == {(2, 75): 80, (2, 90): 96, (1, 120): 48}
    assert buf.count(sm90) == 2 and sm75 not in buf and ptx not in buf
    assert buf[:8] == b"\xee" * 8  # nothing outside the entries' payloads changes
    assert len(buf) == 8 + 2 * len(fat) + 8


def test_counting_only_changes_nothing() -> None:
    fat = bytearray(_fatbin([_entry(2, 80, b"\x80" * 16)]))
    before = bytes(fat)
    held: collections.Counter = collections.Counter()
    prune_fatbin.prune(fat, 0, len(fat), set(), held)
    assert bytes(fat) == before and held == {(2, 80): 16}


def test_a_fatbin_past_its_section_is_an_error() -> None:
    fat = bytearray(_fatbin([_entry(2, 90, b"\x90" * 16)]))
    with pytest.raises(ValueError, match="runs past its section"):
        prune_fatbin.prune(fat, 0, len(fat) - 8, {90}, collections.Counter())
