"""Child-process entry point used by tests/_harness.py (not a test module)."""

import importlib
import pickle
import sys
import traceback
from pathlib import Path


def main() -> None:
    target, rank, size, addr, args_path, out_path = sys.argv[1:7]
    sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
    module_name, func_name = target.split(":")
    args = pickle.loads(Path(args_path).read_bytes())
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = (True, func(int(rank), int(size), addr, *args))
    except BaseException as exc:  # report everything, including SystemExit
        result = (False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(out_path).write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    main()
