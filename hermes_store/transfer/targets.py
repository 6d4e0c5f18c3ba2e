"""Where an export writes, checked before the first byte: the parent must be (or become) a
directory, an existing file needs ``force``, and a special file is written in place.

A regular file is replaced atomically (a temporary sibling renamed over it). A FIFO, a
character device or a socket, or a symlink to one (``/dev/stdout``), is not a file to replace:
renaming over it would swap the device node or the link for a plain file, so it is opened and
written directly instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

from hermes_store.errors import OutputError, OutputExistsError


def plan_target(path: Path, *, force: bool) -> tuple[Path, bool]:
    """Check ``path`` as an export target: the path to write and whether to write it in place
    (a special file) rather than through a temporary file and a rename. A symlink to a regular
    file is refused even with ``force``: the file it names may be anywhere (outside the export
    folder, another user's), and ``force`` was given for the name the caller sees.
    OutputExistsError for an existing target without ``force``; OutputError for a directory, a
    symlink to a file, or a parent that is not one."""
    try:
        st = path.stat()  # follows a symlink to what would really be written
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as err:
        raise cannot_write(path, err) from err
    if st is None:
        if path.is_symlink():
            raise OutputError(f"cannot write {path}: it is a symlink to nothing")
        _check_parent(path)
        return path, False
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {path}: it is a directory")
    if stat.S_ISREG(st.st_mode) and path.is_symlink():
        raise OutputError(f"cannot write {path}: it is a symlink to {path.resolve()}; exports "
                          "never write through a link (remove it, or name the file itself)")
    if not force:
        raise OutputExistsError(str(path))
    return path, not stat.S_ISREG(st.st_mode)


def _check_parent(path: Path) -> None:
    """The nearest existing ancestor must be a directory; missing ones are created later."""
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise OutputError(f"cannot write {path}: {ancestor} is not a directory")
            return


def cannot_write(path: Path | str, err: OSError) -> OutputError:
    return OutputError.writing(path, err)


def open_in_place(path: Path) -> TextIO:
    """Open a special file for writing without creating or truncating anything else."""
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise cannot_write(path, err) from err
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")
