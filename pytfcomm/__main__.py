"""``python -m pytfcomm info``: what this build of pytfcomm contains and how it is set up."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys


def gpu_info() -> dict[str, object]:
    """CUDA build or not, the CUDA driver and GPUs found, and NCCL (path and version, or why not).

    Never raises: on a machine without a GPU it says so.
    """
    from . import _core, _dlpack

    try:
        return dict(_core.gpu_info(_dlpack.nccl_candidates()))
    except Exception as exc:  # report, don't crash `info`
        return {"error": str(exc)}


def tf_ops_info() -> dict[str, object]:
    """The TF op library: prebuilt or compiled on first use, its TF, and whether it has GPU kernels.

    Reads the build record only: it neither imports TensorFlow nor loads the library.
    """
    from pathlib import Path

    from . import _core

    try:
        from . import _tf_build_info as built
    except ImportError:
        return {"library": "none (built with PYTFCOMM_WITH_TF=OFF)"}
    if built.TF_VERSION and (Path(__file__).parent / "_tf_ops.so").exists():
        return {
            "library": "prebuilt",
            "built_against": built.TF_VERSION,
            "gpu_kernels": bool(getattr(built, "TF_GPU_KERNELS", False)),
        }
    cuda = bool(_core.build_info().get("cuda"))
    return {
        "library": "compiled on first use",
        "built_against": None,
        "gpu_kernels": "if TensorFlow is a CUDA build" if cuda else False,
    }


def info() -> dict[str, object]:
    """Build configuration, runtime parameters and optional integrations, as a dict."""
    from . import _core

    data: dict[str, object] = dict(_core.build_info())
    data["python"] = sys.version.split()[0]
    data["platform"] = platform.platform()
    data["cpus"] = os.cpu_count()
    try:
        import numpy

        data["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        data["numpy"] = None
    # One entry per variable of the core's registry, as the environment sets it
    # now; a malformed one shows its error instead of failing `info`.
    data["params"] = {
        p["env"]: p["value"] if p["error"] is None else f"error: {p['error']}"
        for p in _core.param_table()
    }
    # Where rank, size and rendezvous come from, and which variables were ignored, why.
    from ._cluster import explain

    data["cluster"] = explain()
    data["gpu"] = gpu_info()
    data["tf_ops"] = tf_ops_info()
    try:
        from importlib.metadata import version

        data["tensorflow"] = version("tensorflow-cpu")
    except Exception:
        try:
            from importlib.metadata import version

            data["tensorflow"] = version("tensorflow")
        except Exception:
            data["tensorflow"] = None
    return data


MERGE_PROG = "python -m pytfcomm timeline merge"


def _merge(files: list[str], output: str) -> int:
    """``timeline merge``: 0 done; 2 an unusable input; 1 the output cannot be written.
    Errors are one line on stderr."""
    from .errors import InvalidArgumentError
    from .timeline import merge

    try:
        n = merge(files, output)
    except InvalidArgumentError as exc:
        print(f"{MERGE_PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{MERGE_PROG}: error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {n} events from {len(files)} file(s) to {output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytfcomm")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="print the build configuration")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    p_tl = sub.add_parser("timeline", help="work with PYTFCOMM_TIMELINE files")
    tl_sub = p_tl.add_subparsers(dest="timeline_command", required=True)
    p_merge = tl_sub.add_parser(
        "merge",
        help="merge per-rank timelines into one file",
        description="Merge per-rank PYTFCOMM_TIMELINE files into one. Exit status: 0 done, "
        "2 an input is unusable (missing, not a regular file, over 1 GiB, not a timeline), "
        "1 the output cannot be written.",
    )
    p_merge.add_argument("files", nargs="+", help="per-rank timeline files")
    p_merge.add_argument("-o", "--output", required=True, help="the merged file to write")
    args = parser.parse_args(argv)
    if args.command == "timeline":
        return _merge(args.files, args.output)
    if args.command == "info":
        data = info()
        if args.json:
            print(json.dumps(data, indent=2, default=str))
        else:
            for key, value in data.items():
                if isinstance(value, dict):
                    print(f"{key}:")
                    width = max([26, *map(len, value)])
                    for k, v in value.items():
                        print(f"  {k:<{width}} {v}")
                else:
                    print(f"{key:<28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
