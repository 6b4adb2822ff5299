"""Run Horovod's own tests against pytfcomm.horovod: every ``horovod.X`` module is
``pytfcomm.horovod.X`` (nothing added). ``horovod.runner`` (horovodrun, which the tests'
utils import one helper from) is not part of the TF API: a thread helper stands in."""

import importlib
import importlib.abc
import importlib.util
import sys
import threading
import types


def _in_thread(target, args=(), name=None, daemon=True, silent=False):
    t = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    t.start()
    return t


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "horovod" or name.startswith("horovod."):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name.startswith("horovod.runner"):
            m = types.ModuleType(spec.name)
            m.__path__ = []
            m.in_thread = _in_thread
            return m
        return importlib.import_module("pytfcomm." + spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Alias())
