"""The fourth check's probe (../gpu-h200-r4/overhead.py), with the stream pytfcomm
runs a PyTorch or CuPy tensor's collective on as a switch, for an A/B in one call:

    PTC_OWN_STREAM=1 python overhead_ab.py --out DIR --timeline ...

Unset (the default since this round): pytfcomm runs on the tensor library's current
stream, so ``__dlpack__(stream=)`` hands nothing over. ``PTC_OWN_STREAM=1``: as
before this round, on pytfcomm's own stream after the library's hand-off (an event
per call), by emptying ``pytfcomm._dlpack.CURRENT_STREAM`` in every rank.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu-h200-r4"))

import overhead  # noqa: E402

if os.environ.get("PTC_OWN_STREAM") == "1":
    import pytfcomm._dlpack

    pytfcomm._dlpack.CURRENT_STREAM.clear()
# overhead.main() starts its ranks as `python <__file__> --rank r`: this file, so
# that each rank takes the switch too.
overhead.__file__ = os.path.abspath(__file__)

if __name__ == "__main__":
    if "--rank" in sys.argv:  # say, in each rank's log, which streams it reads
        import pytfcomm._dlpack

        print(f"[rank] reads the current stream of {sorted(pytfcomm._dlpack.CURRENT_STREAM)}")
    sys.exit(overhead.main())
