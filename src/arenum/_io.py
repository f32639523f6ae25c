"""Writing files atomically: a temp file in the destination folder, synced, renamed over the target.

Nothing is left at the target, or beside it, when writing fails, and a file that was there before
is untouched. Used by the command line, the plots and ``NGramModel.save``; this module does not
decide what is written.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, BinaryIO, Callable

__all__ = ["atomic_write", "read_archive"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], *, suffix: str = ".tmp") -> int:
    """Call ``write(tmp)`` on a temp file beside ``path``, fsync it, then rename it to ``path``.

    The folder is fsynced after the rename where the platform allows it, so the new file survives
    a crash once this returns. The file gets the mode a plain ``open(path, "w")`` would (temp files
    start as 0600). On any failure, ``KeyboardInterrupt`` included, the temp file is removed and
    ``path`` is left as it was. Returns the size written, in bytes.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".arenum-", suffix=suffix, dir=folder)
    os.close(fd)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
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
    _fsync_folder(folder)
    return os.path.getsize(path)


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_archive(path: str | os.PathLike, read: Callable[[BinaryIO, int], Any], what: str,
                 invalid: type[Exception], invalid_message: Callable[[str, Exception], str]) -> Any:
    """``read(fh, size)`` of the file at ``path``, every failure one ``ValueError`` line naming it.

    A missing or unreadable file raises its ``OSError`` (which names the file); ``invalid`` (the
    reader's own refusal) becomes ``invalid_message(repr(path), exc)``; any other error inside the
    archive (zip, zlib, npy, JSON) becomes "... is not a valid arenum WHAT file: damaged archive";
    ``MemoryError`` passes through.
    """
    name = repr(os.fspath(path))
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            return read(fh, size)
        except invalid as exc:
            raise ValueError(invalid_message(name, exc)) from None
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 -- zip, zlib, npy or JSON errors inside the archive
            msg = str(exc).splitlines()[0] if str(exc) else ""
            raise ValueError(f"{name} is not a valid arenum {what} file: damaged archive "
                             f"({type(exc).__name__}{': ' + msg[:120] if msg else ''})") from None
