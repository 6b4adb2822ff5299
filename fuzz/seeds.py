"""Write seed inputs for fuzz_wire: well-formed hellos and proofs (no secret), frames."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HELLO_MAGIC = 0x314D4D4F43465450
PROTOCOL_VERSION = 10  # csrc/transport/wire.h kProtocolVersion
PROOF_MAGIC = 0x464F5250


def hello(purpose: int, rank: int, size: int, flags: int) -> bytes:
    head = struct.pack("<QIIiiII", HELLO_MAGIC, PROTOCOL_VERSION, purpose, rank, size, 0, flags)
    return head + bytes(32) + b"127.0.0.1".ljust(256, b"\0") + b"host".ljust(128, b"\0")


def chunked(payload: bytes, chunk: int = 63) -> bytes:
    """The session mode's framing: a chunk-length byte before each chunk."""
    out = b""
    for i in range(0, len(payload), chunk):
        part = payload[i : i + chunk]
        out += bytes([len(part) - 1]) + part
    return out


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    proof = struct.pack("<II", PROOF_MAGIC, 0) + bytes(32)
    (out / "seed_secret_hello").write_bytes(b"\0" + chunked(hello(2, 1, 4, 1)))
    (out / "seed_plain_handshake").write_bytes(b"\1" + chunked(hello(1, 2, 4, 0) + proof))
    (out / "seed_frame").write_bytes(b"\5" + struct.pack("<IIQ", 0x41544144, 0, 64) + bytes(24))
    # An ABRT frame of a rank that timed out (reserved = kAbortTimeout), 40 bytes of reason.
    (out / "seed_abort").write_bytes(b"\5" + struct.pack("<IIQ", 0x54524241, 1, 40) + bytes(24))
    (out / "seed_record").write_bytes(b"\3" + record())
    (out / "seed_record_confirm").write_bytes(b"\3" + record_confirm())
    (out / "seed_bundle").write_bytes(b"\4" + bundle())
    (out / "seed_bundle_runs").write_bytes(b"\4" + bundle_runs())


def bundle() -> bytes:
    """A bundle (transport/host/bundle.h) of rank 3's record alone, 16 bytes: 128
    bytes in all, so the target expects one record (1 + 128 % 4)."""
    head = struct.pack("<IIIIII", 0x4C444E42, 1, 3, 1, 1, 16).ljust(64, b"\0")
    return head + bytes(range(16)).ljust(64, b"\0")


def bundle_runs() -> bytes:
    """A bundle of ranks 3-6 in two runs: one 16-byte record for three ranks, one of
    8 bytes for the fourth; 195 bytes in all (3 past the end), so the target expects
    four records (1 + 195 % 4)."""
    head = struct.pack("<IIIIIIII", 0x4C444E42, 4, 3, 2, 3, 16, 1, 8).ljust(64, b"\0")
    return head + bytes(range(16)).ljust(64, b"\0") + bytes(8).ljust(64, b"\0") + bytes(3)


def record() -> bytes:
    """A negotiation record of round 7 (engine/round_record.h): one all-reduce of
    4 float32 with its input, and one withdrawal."""
    entries, withdrawals = 1, 1
    table = 32 + 96 * entries + 16 * withdrawals
    data_at = (table + 63) // 64 * 64
    total = data_at + 64
    head = struct.pack("<IHHQQQ", 0x4F47454E, entries, withdrawals, 7, total, 0)
    entry = struct.pack("<QQQQQIiBBBBI", 11, 3, 4, data_at, 16, 0, 0, 1, 2, 0, 0, 1)
    entry += b"allreduce #3 of MainThread".ljust(40, b"\0")
    body = head + entry + struct.pack("<QQ", 12, 5)
    return body.ljust(data_at, b"\0") + struct.pack("<4f", 1, 2, 3, 4).ljust(64, b"\0")


def record_confirm() -> bytes:
    """A negotiation record of round 7 that confirms one all-reduce of 4 float32 by
    its slot (0) in the agreed cache (engine/agreed_cache.h), with its input."""
    confirms, data_at = 1, 64
    total = data_at + 64
    head = struct.pack("<IHHQQIHH", 0x4F47454E, 0, 0, 7, total, 0, confirms, 0)
    digest = struct.pack("<Q", 0)
    confirm = struct.pack("<QIHH", 3, data_at, 0, 1)
    body = head + digest + confirm
    return body.ljust(data_at, b"\0") + struct.pack("<4f", 1, 2, 3, 4).ljust(64, b"\0")


if __name__ == "__main__":
    main()
