"""The ssh command line that starts one rank on a remote host.

The remote side runs, through the user's login shell::

    cd <cwd> && exec env VAR=value ... sh -c '<WRAPPER>' pytfcomm-rank <command...>

Variables travel on the command line, each shell-quoted, except the job secret: the
launcher writes it as the first line of ssh's standard input, where WRAPPER reads it,
so it never appears in any process's argv (``ps``) on either machine. The launcher then
keeps standard input open: when it closes (the launcher stops the rank, dies, or the
connection drops) WRAPPER's watchdog sends the rank SIGTERM (and SIGCONT, in case it is
stopped) and, after the grace period, SIGKILL. WRAPPER exits with the rank's status
(128+N when killed by signal N), which ssh passes back.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["DEFAULT_SSH", "remote_command", "ssh_argv"]

DEFAULT_SSH = "ssh -o BatchMode=yes"

#: Exit status of WRAPPER when no secret line arrived on standard input.
NO_SECRET_STATUS = 111

# POSIX sh, no single quotes (so shlex.quote leaves it readable). $1.. is the command.
# Background jobs get /dev/null as stdin, so the watchdog reads the real one through fd 3.
# SIGCONT follows every SIGTERM: a stopped rank would hold SIGTERM pending, and only
# die by the SIGKILL after GRACE seconds.
_WRAPPER = """\
IFS= read -r PYTFCOMM_SECRET || { echo "pytfcomm-run: no job secret on stdin" >&2; exit 111; }
export PYTFCOMM_SECRET
"$@" </dev/null &
pid=$!
trap "kill -TERM $pid 2>/dev/null; kill -CONT $pid 2>/dev/null" TERM INT HUP
exec 3<&0
{ while IFS= read -r _; do :; done
  kill -TERM $pid 2>/dev/null; kill -CONT $pid 2>/dev/null
  sleep GRACE; kill -KILL $pid 2>/dev/null; } <&3 >/dev/null 2>&1 &
watch=$!
exec 3<&-
while :; do
  wait $pid; rc=$?
  kill -0 $pid 2>/dev/null || break
done
kill $watch 2>/dev/null
exit $rc
"""


def remote_command(argv: Sequence[str], env: Mapping[str, str], cwd: str, grace: float) -> str:
    """The command string ssh runs remotely (see module doc); ``env`` must hold no secret."""
    assert "PYTFCOMM_SECRET" not in env
    wrapper = _WRAPPER.replace("GRACE", str(max(1, round(grace))))
    assignments = [shlex.quote(f"{k}={v}") for k, v in sorted(env.items())]
    parts = [
        "cd",
        shlex.quote(cwd),
        "&&",
        "exec",
        "env",
        *assignments,
        "sh",
        "-c",
        shlex.quote(wrapper),
        "pytfcomm-rank",
        *(shlex.quote(a) for a in argv),
    ]
    return " ".join(parts)


def ssh_argv(
    ssh_command: str | None,
    target: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    grace: float,
    cwd: str | None = None,
) -> list[str]:
    """``ssh ... target '<remote command>'`` for one rank.

    ``ssh_command`` defaults to PYTFCOMM_RUN_SSH, then ``ssh -o BatchMode=yes``.
    """
    command = ssh_command or os.environ.get("PYTFCOMM_RUN_SSH") or DEFAULT_SSH
    cwd = os.getcwd() if cwd is None else cwd
    return [*shlex.split(command), target, remote_command(argv, env, cwd, grace)]
