"""Writing files atomically: a temp file in the destination folder, renamed over the target.

Nothing is left at the target, or beside it, when writing fails. Used by the command line and the
plots; this module does not decide what is written.
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], *, suffix: str = ".tmp") -> int:
    """Call ``write(tmp)`` on a temp file beside ``path``, then rename it to ``path``.

    The file gets the mode a plain ``open(path, "w")`` would (temp files start as 0600). Returns the
    size written, in bytes.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".arenum-", suffix=suffix, dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        write(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return os.path.getsize(path)
