"""Files that only this user may have written: the job secret, hvd.elastic's commits.

One rule (docs/security.md, "Files pytfcomm trusts"): a file pytfcomm reads and
trusts (a secret, a pickle) must be a regular file owned by this process's
effective user that group and others cannot write, checked on the open file
(``fstat``), never on a path that may change in between. ``no_access`` also
forbids group and others to read it (a secret). ``follow=False`` refuses a
symbolic link as the last component (``O_NOFOLLOW``): a link planted in a shared
directory must not lead pytfcomm to another file. A directory whose files are
trusted must obey the same rule (owner, not writable by group or others, not a
link). Violations raise :class:`ConfigError` naming the path, the rule and the
fix.
"""

from __future__ import annotations

import os
import stat

from .errors import ConfigError

__all__ = ["open_owned", "open_owned_dir", "read_bounded"]

_GROUP_OTHER_WRITE = 0o022
_GROUP_OTHER_ANY = 0o077


def _check(st: os.stat_result, what: str, fix: str, *, no_access: bool, kind: str) -> None:
    """``st`` (of an open file or directory) obeys the rule, else ConfigError."""
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != me:
        problem = (
            f"is owned by uid {st.st_uid}, not by this process's user (uid {me}), and "
            f"pytfcomm trusts only a {kind} of your own (its owner decides what it holds)"
        )
    elif no_access and mode & _GROUP_OTHER_ANY:
        problem = (
            f"is accessible to group or others (mode {mode:04o}), and pytfcomm trusts "
            f"only a private {kind} here (chmod 600 it)"
        )
    elif mode & _GROUP_OTHER_WRITE:
        problem = (
            f"is writable by group or others (mode {mode:04o}), and pytfcomm trusts only "
            f"a {kind} that you alone can write (chmod go-w it)"
        )
    else:
        return
    raise ConfigError(f"{what} {problem}; {fix}")


def _is_link(path: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open(
    path: str, flags: int, what: str, fix: str, follow: bool, dir_fd: int | None = None
) -> int:
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        return os.open(path, flags | os.O_CLOEXEC | nofollow, dir_fd=dir_fd)
    except OSError as exc:
        if not follow and _is_link(path, dir_fd):  # ELOOP, or ENOTDIR with O_DIRECTORY
            raise ConfigError(
                f"{what} is a symbolic link, and pytfcomm does not follow one there (a "
                f"link planted in a shared directory could lead it to another file); {fix}"
            ) from None
        raise ConfigError(f"{what}: cannot open it ({exc.strerror}); {fix}") from None


def open_owned(
    path: str,
    what: str,
    fix: str,
    *,
    no_access: bool = False,
    follow: bool = True,
    dir_fd: int | None = None,
) -> int:
    """A read-only descriptor of the regular file ``path`` after checking it obeys the
    rule (module doc); ConfigError ("``what`` ...; ``fix``") otherwise.

    Opens with O_NONBLOCK so a FIFO given by mistake is refused, not waited on.
    ``dir_fd``: ``path`` is relative to that directory.
    """
    fd = _open(path, os.O_RDONLY | os.O_NONBLOCK, what, fix, follow, dir_fd)
    try:
        st = os.fstat(fd)  # of the file opened, not of whatever the path names by now
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} is not a regular file; {fix}")
        _check(st, what, fix, no_access=no_access, kind="file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_owned_dir(path: str, what: str, fix: str) -> int:
    """A descriptor of the directory ``path`` (not a link) after checking it obeys the
    rule: owned by this user, not writable by group or others; ConfigError otherwise."""
    fd = _open(path, os.O_RDONLY | os.O_DIRECTORY, what, fix, follow=False)
    try:
        _check(os.fstat(fd), what, fix, no_access=False, kind="directory")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(fd: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``fd``: more than ``limit`` means "too big"."""
    data = b""
    while len(data) <= limit:
        chunk = os.read(fd, limit + 1 - len(data))
        if not chunk:
            break
        data += chunk
    return data
