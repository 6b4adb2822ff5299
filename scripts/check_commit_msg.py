"""Check a commit message against CONTRIBUTING.md's rule (git's commit-msg hook).

    python scripts/check_commit_msg.py .git/COMMIT_EDITMSG   # exit 1, saying why, if it breaks it

The rule: a subject line of at most 72 characters; when a body follows, a blank
second line. Lines git strips (comments, everything below the scissors line of
`git commit -v`) do not count. .pre-commit-config.yaml runs this as its
`commit-msg` hook.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72
_SCISSORS = "# ------------------------ >8 ------------------------"


def message_lines(text: str) -> list[str]:
    """The lines git keeps: up to the scissors line, without comments and trailing blanks."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith(_SCISSORS):
            break
        if not line.startswith("#"):
            kept.append(line.rstrip())
    while kept and not kept[0]:
        kept.pop(0)
    while kept and not kept[-1]:
        kept.pop()
    return kept


def problems(text: str) -> list[str]:
    """What in `text` breaks the rule, one sentence each; empty when it is fine."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty: write a subject line"]
    found = []
    subject = lines[0]
    if len(subject) > MAX_SUBJECT:
        found.append(
            f"the subject has {len(subject)} characters, more than {MAX_SUBJECT}: "
            "shorten it and put the detail in the body"
        )
    if len(lines) > 1 and lines[1]:
        found.append("the second line is not blank: leave one empty line between subject and body")
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: check_commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    found = problems(Path(args[0]).read_text(encoding="utf-8", errors="replace"))
    for p in found:
        print(f"commit message: {p} (CONTRIBUTING.md, 'Commits')", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
