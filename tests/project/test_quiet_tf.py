"""scripts/quiet_tf.sh, which scripts/main.sh runs its TF steps under: TensorFlow's
start-up log lines (absl's pre-init notice, INFO lines, the CPU-feature note; with or
without pytfcomm-run's rank prefix) leave stderr, errors and everything else stay, stdout
is untouched and the command's exit status is kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

from _paths import ROOT

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796597096.027585   27955 port.cc:153] oneDNN custom operations are on.",
    "I0000 00:00:1796597096.102189   27955 cpu_feature_guard.cc:227] This TensorFlow binary "
    "is optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "[1] WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "[0] I0000 00:00:1796597114.701615   28329 port.cc:153] oneDNN custom operations are on.",
]
KEPT = [
    "E0000 00:00:1796597114.701615   28329 direct_session.cc:12] a real error",
    "W0000 00:00:1796597114.701615   28329 foo.cc:7] a warning after start-up",
    "Traceback (most recent call last):",
    "[0] pytfcomm.PeerLostError: rank 1 was lost",
    "INFO: a line of the program's own",
]


def _run(
    tmp_path: Path, status: int, env_level: str | None = None
) -> subprocess.CompletedProcess[str]:
    lines = tmp_path / "stderr.txt"
    lines.write_text("\n".join(NOISE[:3] + KEPT[:2] + NOISE[3:] + KEPT[2:]) + "\n")
    script = (
        "set -euo pipefail\n"
        + (f"export TF_CPP_MIN_LOG_LEVEL={env_level}\n" if env_level else "")
        + f"source {ROOT / 'scripts' / 'quiet_tf.sh'}\n"
        + "rc=0\n"
        + f"quiet_tf bash -c 'cat {lines} >&2; echo result; exit {status}' || rc=$?\n"
        + 'echo "status $rc $TF_CPP_MIN_LOG_LEVEL"\n'
    )
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd="/"
    )


def test_start_up_lines_go_and_the_rest_stays(tmp_path: Path) -> None:
    out = _run(tmp_path, 0)
    assert out.stdout == "result\nstatus 0 2\n", out.stdout + out.stderr
    assert out.stderr.splitlines() == KEPT, out.stderr


def test_the_exit_status_is_the_commands(tmp_path: Path) -> None:
    out = _run(tmp_path, 3)
    assert out.stdout.splitlines() == ["result", "status 3 2"], out.stdout + out.stderr
    assert out.stderr.splitlines() == KEPT


def test_level_zero_shows_everything(tmp_path: Path) -> None:
    out = _run(tmp_path, 0, env_level="0")
    assert out.stdout.splitlines() == ["result", "status 0 0"], out.stdout + out.stderr
    assert len(out.stderr.splitlines()) == len(NOISE) + len(KEPT)
