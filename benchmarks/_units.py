"""Byte-size parsing and formatting shared by the CLI and the report."""

from __future__ import annotations

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    """Parse ``4K``, ``64KiB``, ``1M``, ``4096`` (binary units) into bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    num = t[: len(t) - len(unit)]
    if not num.isdigit():
        raise ValueError(f"bad size {text!r}")
    return int(num) * _UNITS[unit]


def parse_sizes(spec: str) -> list[int]:
    """``4K..256M`` (x4 steps), ``4K..256M:2`` (x2 steps) or a list ``4K,64K,1M``."""
    sizes: list[int] = []
    for part in spec.split(","):
        if ".." in part:
            rng, _, step = part.partition(":")
            lo, hi = (parse_bytes(p) for p in rng.split(".."))
            factor = int(step) if step else 4
            if factor < 2 or lo <= 0 or hi < lo:
                raise ValueError(f"bad size range {part!r}")
            s = lo
            while s <= hi:
                sizes.append(s)
                s *= factor
        else:
            sizes.append(parse_bytes(part))
    for s in sizes:
        if s <= 0 or s % 4:
            raise ValueError(f"size {s} is not a positive multiple of 4 bytes (float32)")
    return sorted(set(sizes))


def fmt_bytes(n: int) -> str:
    """4096 -> '4K', 268435456 -> '256M' (exact binary units only, else bytes)."""
    for unit in ("G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)
