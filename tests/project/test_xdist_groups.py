"""The suite's split across xdist workers (tests/_xdist_groups.py): whole modules,
and every module that needs the session's builds on one worker."""

from __future__ import annotations

from collections import OrderedDict

import _xdist_groups as groups


def test_build_modules_share_one_unit_and_others_keep_their_module() -> None:
    build_ids = [
        "tests/gpu/test_gpu_collectives.py::test_collectives_match_numpy[nccl-1]",
        "tests/gpu/test_dlpack_host.py::test_bad_cuda_dlpack_inputs_raise_clear_errors",
        "tests/builds/test_cuda_build.py::test_x",
        "tests/builds/test_tf_gpu_build.py::TestA::test_y",
    ]
    assert {groups.scope_of(i) for i in build_ids} == {groups.BUILDS_SCOPE}
    assert groups.scope_of("tests/core/test_shm.py::test_a[x::y]") == "tests/core/test_shm.py"
    assert groups.scope_of("tests/core/test_gpu_names.py::test_a") == "tests/core/test_gpu_names.py"
    # A rootdir above tests/ changes the prefix, not the grouping.
    assert groups.scope_of("repo/tests/gpu/test_a.py::t", "repo/tests/") == groups.BUILDS_SCOPE


def test_every_build_module_exists() -> None:
    for entry in groups.BUILD_MODULES:
        path = groups.TESTS / entry
        assert path.is_dir() if entry.endswith("/") else path.is_file(), entry


def test_every_long_first_unit_exists_once() -> None:
    assert len(set(groups.LONG_FIRST)) == len(groups.LONG_FIRST), "a unit is listed twice"
    for unit in groups.LONG_FIRST:
        assert unit == groups.BUILDS_SCOPE or (groups.TESTS / unit).is_file(), unit
        assert not (unit != groups.BUILDS_SCOPE and groups.is_build_module(unit)), (
            f"{unit} runs in {groups.BUILDS_SCOPE!r}: list that instead"
        )


def test_long_first_units_go_to_the_front_in_their_order() -> None:
    queue = OrderedDict((u, {}) for u in ["a", "b", "c", "d", "e"])
    groups.long_first(queue, ["d", "gone", "b"])
    assert list(queue) == ["d", "b", "a", "c", "e"]
    groups.long_first(queue, [])
    assert list(queue) == ["d", "b", "a", "c", "e"]


def test_the_test_that_builds_gets_the_build_time() -> None:
    """tests/builds/test_cuda_build.py's first test only configures; its second builds the
    core (minutes on 2 busy cores) and must get the build's time, not the usual 300 s."""
    import _gpu_builds as builds

    order = [{"cuda_configure"}, {"cuda_build"}, {"cuda_package"}, {"gpu_env"}, {"tmp_path"}]
    extra = builds.first_use_seconds(order)
    assert extra[0] == builds.CONFIGURE_TIMEOUT
    assert extra[1] == builds.BUILD_TIMEOUT
    assert extra[2] == 0.0
    assert extra[3] == builds.STEP_SECONDS["standin_libs"]
    assert extra[4] == 0.0
