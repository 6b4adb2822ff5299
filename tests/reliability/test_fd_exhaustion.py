"""A rank out of file descriptors says so at once (docs/reliability.md).

When accept() fails with EMFILE the connection stays queued and the listener
stays readable: rank 0's rendezvous used to retry it in a busy loop (tens of
thousands of failed calls a second, a core busy) until the connect timeout,
then blame the size, address or secret. Now it backs off and, within a second,
fails with the cause and the process's limit.
"""

from __future__ import annotations

import re

from _harness import run_ranks

CONNECT_TIMEOUT = 60.0


def test_rendezvous_out_of_descriptors_names_emfile_and_the_limit() -> None:
    outs = run_ranks(
        2,
        "fault_workers:out_of_descriptors",
        1,  # descriptors left to rank 0: its listener takes the last
        timeout=CONNECT_TIMEOUT + 60,
        env={"PYTFCOMM_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT)},
    )
    root, other = outs
    assert root["type"] == "ConfigError", root
    assert "out of file descriptors (EMFILE) accepting connections" in root["message"], root
    assert re.search(rf"limit is {root['limit']} \(ulimit -n\); raise it", root["message"]), root
    assert root["seconds"] < CONNECT_TIMEOUT / 4, root  # not at the connect deadline
    # The other rank is not left waiting for the deadline either.
    assert other["type"] is not None and other["seconds"] < CONNECT_TIMEOUT / 2, other
