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
"""

from __future__ import annotations

from pathlib import Path

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


def is_build_module(relpath: str) -> bool:
    """Whether ``relpath`` (a path relative to tests/) is one of BUILD_MODULES."""
    return any(relpath.startswith(m) if m.endswith("/") else relpath == m for m in BUILD_MODULES)


def scope_of(nodeid: str, tests_prefix: str = "tests/") -> str:
    """The unit of work a test belongs to: its module, or BUILDS_SCOPE."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(tests_prefix) and is_build_module(module[len(tests_prefix) :]):
        return BUILDS_SCOPE
    return module


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
    """Under ``--dist loadfile``: whole modules, with BUILD_MODULES as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    rootdir = Path(str(config.rootpath)).resolve()
    try:
        prefix = TESTS.relative_to(rootdir).as_posix() + "/"
    except ValueError:  # tests/ outside the rootdir: plain per-module units
        prefix = "\0"

    class ModulesAndBuilds(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, prefix)

    return ModulesAndBuilds(config, log)
