"""Helpers for tests that simulate hosts with network namespaces they create."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (bounded), capturing its output."""
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def require_netns() -> None:
    """Skip the test, saying why, where namespaces cannot be created."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed: cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (CAP_NET_ADMIN)")
