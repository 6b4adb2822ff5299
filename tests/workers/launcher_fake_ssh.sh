#!/bin/sh
# A stand-in for ssh in tests/launch/test_launcher.py: "fake_ssh HOST COMMAND" logs its
# arguments (one per line, to $FAKE_SSH_LOG) and runs COMMAND here through sh -c, as
# sshd runs it through the login shell, in an environment as bare as a fresh login.
host=$1
shift
if [ -n "$FAKE_SSH_LOG" ]; then
  printf 'host=%s\nargc=%s\ncmd=%s\n' "$host" "$#" "$1" >>"$FAKE_SSH_LOG"
fi
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$1"
