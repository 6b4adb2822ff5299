"""How the suite splits across pytest-xdist workers (a pytest plugin; not a test module).

scripts/test.sh runs the suite on two workers with ``--dist loadfile``: most
multi-process tests leave a core idle while they wait (deadlines, liveness
timeouts, ranks waiting for each other). Under ``loadfile`` this plugin's
scheduler hands out whole modules, as xdist's own does, except that the
modules in :data:`BUILD_MODULES` (those whose tests need one of the session's
builds: the CUDA build of the core, the GPU stand-ins) go to one worker
together, so each build is made once. A module runs whole on one worker, so
its module-scoped fixtures (a Slurm cluster, a communicator) are set up once.

(xdist's ``loadgroup`` would do this with marks, but 3.8 names a group by
rewriting ``item._nodeid``, which pytest 9.2 no longer reads.)

Collection checks the list: a test that needs a build outside these modules is
a usage error that says to add its module here.

Order: xdist hands out the units with the most tests first, so a module of one
slow test (a TF op library build, the soak) used to start last and keep one
worker busy while the other sat idle. The units in :data:`LONG_FIRST`, the
longest by ``--durations`` on the 2-core VM, go first instead, so that each
worker's last units are short ones. It is an order only: every test runs
either way, and none depends on it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
# Paths relative to tests/; a trailing "/" takes a whole directory.
BUILD_MODULES = (
    "gpu/",
    "builds/test_cuda_build.py",
    "builds/test_tf_gpu_build.py",
    "project/test_core_stub.py",
)
BUILDS_SCOPE = "the session's builds"
# Units (paths relative to tests/, or BUILDS_SCOPE) that start first, longest first.
LONG_FIRST: tuple[str, ...] = (
    BUILDS_SCOPE,  # the CUDA build of the core, then the TF op library with GPU kernels
    "builds/test_tf_first_use_build.py",  # one test: compiles the TF op library
    "launch/test_ray_train.py",  # starts a Ray cluster, then the same jobs under pytfcomm-run
)


def is_build_module(relpath: str) -> bool:
    """Whether ``relpath`` (a path relative to tests/) is one of BUILD_MODULES."""
    return any(relpath.startswith(m) if m.endswith("/") else relpath == m for m in BUILD_MODULES)


def scope_of(nodeid: str, tests_prefix: str = "tests/") -> str:
    """The unit of work a test belongs to: its module, or BUILDS_SCOPE."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(tests_prefix) and is_build_module(module[len(tests_prefix) :]):
        return BUILDS_SCOPE
    return module


def long_first(workqueue: OrderedDict[str, Any], first: Sequence[str]) -> None:
    """Move the units of ``first`` still waiting in ``workqueue`` to its front, in that order."""
    for unit in reversed(first):
        if unit in workqueue:
            workqueue.move_to_end(unit, last=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that needs a session build outside BUILD_MODULES."""
    import _gpu_builds  # tests/, on sys.path (tests/conftest.py)

    builds = set(_gpu_builds.BUILDS_OF)
    for item in items:
        if not builds & set(getattr(item, "fixturenames", ())):
            continue
        rel = Path(str(item.path)).resolve().relative_to(TESTS).as_posix()
        if not is_build_module(rel):
            raise pytest.UsageError(
                f"{item.nodeid} needs a session build ({sorted(builds & set(item.fixturenames))}) "
                f"but tests/{rel} is not in BUILD_MODULES of tests/_xdist_groups.py: add it "
                "there, so that xdist runs it on the worker that makes the builds"
            )


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadfile``: whole modules, BUILD_MODULES as one unit, LONG_FIRST first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    rootdir = Path(str(config.rootpath)).resolve()
    try:
        prefix = TESTS.relative_to(rootdir).as_posix() + "/"
    except ValueError:  # tests/ outside the rootdir: plain per-module units
        prefix = "\0"

    first = [u if u == BUILDS_SCOPE else prefix + u for u in LONG_FIRST]

    class ModulesAndBuilds(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, prefix)

        def _assign_work_unit(self, node: object) -> None:
            long_first(self.workqueue, first)
            super()._assign_work_unit(node)

    return ModulesAndBuilds(config, log)
