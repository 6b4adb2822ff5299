"""``--gpus-per-rank N``: each rank's CUDA_VISIBLE_DEVICES (docs/gpu.md, "GPU placement").

The GPUs to hand out, the same list for every host (block placement: local rank ``r``
gets entries ``r*N .. r*N+N-1``), come from, first that applies:

1. ``--gpus 0,1,2,3`` (any CUDA_VISIBLE_DEVICES entries: indices, ``GPU-<uuid>``,
   ``MIG-<uuid>``), for remote hosts unlike this one or a subset of the GPUs;
2. the launcher's own CUDA_VISIBLE_DEVICES, when set (an empty value: no GPU);
3. ``nvidia-smi -L`` on this machine: indices 0..count-1;
4. none found: an error naming what was tried.

No TensorFlow and no CUDA library is loaded: CUDA would fix its device list in this
process, and the launcher must stay light.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence

from .hosts import Placement, UsageError

__all__ = ["GPUS_PER_RANK_VAR", "assign_gpus", "parse_gpu_list", "visible_gpus"]

#: Set for every rank with ``--gpus-per-rank N`` (to N): the rank's CUDA_VISIBLE_DEVICES
#: already lists just its GPUs (``pytfcomm.tf.pin_gpu`` then keeps all of them).
GPUS_PER_RANK_VAR = "PYTFCOMM_GPUS_PER_RANK"

_GPU_LINE_RE = re.compile(r"^GPU [0-9]+:", re.MULTILINE)
_NEGATIVE_RE = re.compile(r"-[0-9]+")
_NVIDIA_SMI_TIMEOUT_S = 30.0


def parse_gpu_list(text: str, what: str) -> list[str]:
    """The entries of a CUDA_VISIBLE_DEVICES-style list. A negative index ends the list
    (CUDA ignores it and everything after it, so ``-1`` hides every GPU)."""
    out: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if _NEGATIVE_RE.fullmatch(entry):
            break
        if not entry:
            if text.strip():
                raise UsageError(f"{what}={text!r} has an empty entry.")
            continue
        if entry in out:
            raise UsageError(f"{what}={text!r} lists GPU {entry!r} twice.")
        out.append(entry)
    return out


def _nvidia_smi_count(which: Callable[[str], str | None]) -> int | None:
    """GPUs ``nvidia-smi -L`` lists, or None without a working nvidia-smi."""
    exe = which("nvidia-smi")
    if exe is None:
        return None
    try:
        res = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return len(_GPU_LINE_RE.findall(res.stdout))


def visible_gpus(
    given: str | None,
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
) -> tuple[list[str], str]:
    """The GPUs to hand out and where the list came from (for messages)."""
    if given is not None:
        return parse_gpu_list(given, "--gpus"), f"--gpus {given}"
    if "CUDA_VISIBLE_DEVICES" in environ:
        text = environ["CUDA_VISIBLE_DEVICES"]
        return parse_gpu_list(text, "CUDA_VISIBLE_DEVICES"), f"CUDA_VISIBLE_DEVICES={text!r}"
    count = _nvidia_smi_count(which)
    if count is None:
        return [], "no CUDA_VISIBLE_DEVICES and no working nvidia-smi on this machine"
    return [str(i) for i in range(count)], f"nvidia-smi -L lists {count}"


def assign_gpus(
    placements: Sequence[Placement], per_rank: int, gpus: list[str], source: str
) -> list[str]:
    """Each rank's CUDA_VISIBLE_DEVICES value; UsageError when a host has too few GPUs."""
    most = max(p.local_size for p in placements)
    if len(gpus) < most * per_rank:
        busiest = next(p.host.name for p in placements if p.local_size == most)
        raise UsageError(
            f"--gpus-per-rank {per_rank}: {busiest} runs {most} rank(s), which need "
            f"{most * per_rank} GPU(s), but {len(gpus)} are available ({source}). Start "
            "fewer ranks per host (-np, -H host:slots), lower --gpus-per-rank, or name the "
            "GPUs with --gpus 0,1,... (every host is assumed to have the same GPUs)."
        )
    return [",".join(gpus[p.local_rank * per_rank :][:per_rank]) for p in placements]
