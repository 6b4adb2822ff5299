"""Shrink a CUDA library to the GPU code of the architectures kept, for carrying.

    python scripts/prune_fatbin.py SRC DST [SM ...]      (default SM: 90)

The nvidia-nccl-cu13 wheel's ``libnccl.so.2`` is 344 MB, nearly all of it GPU
code for eight architectures in its ``.nv_fatbin`` and ``__nv_relfatbin``
sections, more than the device tool carries (64 MiB). This zeroes the payload
of every fatbin entry whose architecture is not kept and leaves every byte of
the host code, the ELF layout and the kept entries as they were, so ``xz``
then brings the library to about 44 MB (sm_90 only). On a GPU of a kept
architecture the CUDA driver loads the kept entry; an entry that was zeroed
must not be loaded, so run the result only on those GPUs. It prints how much
GPU code each (kind, architecture) held; with no DST it only prints.

The fatbin layout it walks (as publicly described, e.g. by cuobjdump's
output): a header (u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size
of the entries), then entries, each a header (u16 kind: 1 PTX, 2 ELF; u16
version; u32 header size; u64 payload size; ...; u32 architecture at byte 28)
followed by its payload. Anything else stops the walk of that fatbin.
"""

from __future__ import annotations

import collections
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")


def fatbin_sections(path: str) -> list[tuple[int, int]]:
    """(file offset, size) of each fatbin section, from readelf."""
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    found = []
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 5 and parts[0].startswith("[") and parts[1] in SECTIONS:
            found.append((int(parts[4], 16), int(parts[5], 16)))
    return found


def prune(buf: bytearray, start: int, end: int, keep: set[int], held: collections.Counter) -> None:
    """Walks the fatbins in buf[start:end]; zeroes entries not in ``keep`` (if any)."""
    pos = start
    while pos + 16 <= end:
        magic, _, header, size = struct.unpack_from("<IHHQ", buf, pos)
        if magic != MAGIC:
            pos += 8  # fatbins are 8-byte aligned, with padding between them
            continue
        entry, stop = pos + header, pos + header + size
        if stop > end:
            raise ValueError(f"fatbin at {pos:#x} runs past its section")
        while entry + 32 <= stop:
            kind, _, ehead, payload = struct.unpack_from("<HHIQ", buf, entry)
            if ehead == 0 or kind not in (1, 2):
                break
            arch = struct.unpack_from("<I", buf, entry + 28)[0]
            first, last = entry + ehead, entry + ehead + payload
            if last > stop:
                raise ValueError(f"fatbin entry at {entry:#x} runs past its fatbin")
            held[(kind, arch)] += payload
            if keep and arch not in keep:
                buf[first:last] = bytes(payload)
            entry = last
        pos = stop


def main(argv: list[str]) -> int:
    """Prints the GPU code per architecture; writes the pruned copy when DST is given."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    src, dst = argv[0], (argv[1] if len(argv) > 1 else None)
    keep = {int(a) for a in argv[2:]} or {90}
    buf = bytearray(open(src, "rb").read())
    held: collections.Counter = collections.Counter()
    sections = fatbin_sections(src)
    if not sections:
        print(f"{src}: no fatbin section", file=sys.stderr)
        return 1
    for offset, size in sections:
        prune(buf, offset, offset + size, keep if dst else set(), held)
    for (kind, arch), n in sorted(held.items()):
        mark = "kept" if arch in keep or not dst else "zeroed"
        print(f"{'PTX' if kind == 1 else 'ELF'} sm_{arch}: {n / 1e6:.1f} MB {mark if dst else ''}")
    if dst:
        with open(dst, "wb") as f:
            f.write(buf)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
