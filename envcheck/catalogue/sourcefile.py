"""A catalogue file's text, read only if it is a regular file within the size limit."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from envcheck.catalogue.sourcelimits import SourceLimits
from envcheck.catalogue.sourcetext import PACK_ABOVE, SourceText

__all__ = ["describe_os_error", "file_kind", "read_source"]


def read_source(path: Path, limits: SourceLimits
                ) -> tuple[str | SourceText | None, str | None]:
    """The text of a catalogue file, or why it cannot be read: (text, None) or (None, reason).
    A large file's text is held compressed (:mod:`.sourcetext`).

    Only a regular file is read, and only after ``fstat`` says it is within
    ``limits.max_bytes``; it is opened non-blocking, so a FIFO (even one swapped in after the
    directory was listed) never blocks the loader.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return None, describe_os_error(exc)
    try:
        info = os.fstat(fd)
        kind = _not_regular(info.st_mode)
        if kind is not None:
            return None, f"{kind}, not a regular file: envcheck reads only regular files"
        if info.st_size > limits.max_bytes:
            return None, limits.too_large(info.st_size)
        with os.fdopen(os.dup(fd), "rb") as f:
            # the file may have grown since fstat: a byte more than the limit is read
            packed = SourceText.read(f, limits.max_bytes + 1) \
                if info.st_size > PACK_ABOVE else None
            if packed is None:  # small, or not UTF-8 (where: the whole text's decoding)
                data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        return None, describe_os_error(exc)
    finally:
        os.close(fd)
    if packed is not None:
        text, size = packed
        return (None, limits.too_large(size)) if size > limits.max_bytes else (text, None)
    if len(data) > limits.max_bytes:
        return None, limits.too_large(len(data))
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, f"cannot read: not UTF-8 text (byte 0x{data[exc.start]:02X} on line {line})"


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def describe_os_error(exc: OSError) -> str:
    """An OS error on a catalogue path in words (without repeating the path)."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    return f"cannot read: {exc.strerror or exc}"


def file_kind(path: Path) -> str | None:
    """None if ``path`` (followed through symlinks) is a regular file, else what it is (or
    why it cannot be examined), in words; never opens it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ENOENT and path.is_symlink():
            return f"a broken symlink (to {os.readlink(path)!r})"
        return describe_os_error(exc)
    kind = _not_regular(mode)
    return None if kind is None else f"{kind}, not a regular file"
