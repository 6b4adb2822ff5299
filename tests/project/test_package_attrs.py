"""`import pytfcomm` stays light; TensorFlow names, `pytfcomm.tf` among them, load on use."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tempfile.gettempdir(),  # not the source tree, which has no built _core
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )


def test_pytfcomm_tf_is_an_attribute_that_loads_on_first_use() -> None:
    res = _run(
        """
        import sys
        import pytfcomm
        assert "tensorflow" not in sys.modules, "import pytfcomm loaded TensorFlow"
        counts = pytfcomm.tf.counters()
        assert isinstance(counts, dict), counts
        assert "tensorflow" in sys.modules
        assert pytfcomm.tf is sys.modules["pytfcomm.tf"]
        print("ok", sorted(counts)[:3])
        """
    )
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stderr[-2000:]


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    res = _run(
        """
        import pytfcomm
        try:
            pytfcomm.no_such_thing
        except AttributeError as exc:
            print("ok", exc)
        """
    )
    assert res.returncode == 0 and "ok module 'pytfcomm' has no attribute" in res.stdout, res
