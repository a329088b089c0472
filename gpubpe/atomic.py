"""Atomic outputs: every file gpubpe writes appears whole under its final name, or not at all.

A file is written under a temporary name in its own folder (so the rename
stays on one file system), flushed, fsynced and renamed into place
(``os.replace`` is atomic on POSIX). A failure or an interrupt removes the
temporary file and leaves any earlier file under the final name untouched.
Files are created with mode 0666 minus the umask (0644 usually), as every
other tool does.

Two files (token ids and offsets) cannot be renamed as one step; see
``gpubpe.encode_files`` for the manifest that commits such a pair.

The library installs no signal handlers: the ``gpubpe`` command turns
SIGTERM into an exception, so these cleanups run there too.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path


def temporary_path(path: Path) -> Path:
    """A fresh hidden name beside ``path``: ``.NAME.<pid>.<random>.tmp``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")


def open_new(path: Path, binary: bool = True):
    """Create ``path`` (which must not exist) for writing, mode 0666 minus the umask."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if binary:
            return os.fdopen(descriptor, "wb")
        return os.fdopen(descriptor, "w", encoding="utf-8", newline="")
    except BaseException:  # an interrupt: the caller removes the file, nothing holds it
        os.close(descriptor)
        raise


def finish(handle) -> os.stat_result:
    """Flush, fsync and close ``handle``; returns its final stat (inode, size, mtime)."""
    handle.flush()
    os.fsync(handle.fileno())
    stat = os.fstat(handle.fileno())
    handle.close()
    return stat


@contextmanager
def atomic_output(path, binary: bool = True):
    """``with atomic_output(path) as out:`` write ``out``; it appears at ``path`` on success.

    On any exception (KeyboardInterrupt and SystemExit included) the temporary
    file is removed and ``path`` keeps what it held before.
    """
    path = Path(path)
    temporary = temporary_path(path)
    handle = None
    try:  # from before the file is made: an interrupt inside open_new leaves none either
        handle = open_new(temporary, binary)
        yield handle
        finish(handle)
        os.replace(temporary, path)
    except BaseException:
        if handle is not None:
            handle.close()
        temporary.unlink(missing_ok=True)
        raise


def write_bytes_atomically(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    with atomic_output(path) as out:
        out.write(data)


def write_text_atomically(path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see the module docstring)."""
    write_bytes_atomically(path, text.encode("utf-8"))


@contextmanager
def folder_lock(folder, shared: bool = False):
    """Hold an advisory lock on ``folder`` (flock on the directory itself: no lock file).

    Committing a pair of files takes it exclusively, reading a pair shared, so
    two commits never interleave their renames (else the last renames could
    leave ids of one run beside offsets of another) and a reader never sees
    a commit half done. Where the folder cannot be locked (no read permission,
    a file system without flock), it goes on unlocked; the manifest check
    still refuses a mismatched pair.
    """
    try:
        import fcntl

        descriptor = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def check_output(path, inputs=(), what: str = "output") -> Path:
    """Refuse, before any work, an output whose folder is missing or which is also an input."""
    from .errors import ConfigError

    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{what} {path}: folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path}: folder {folder} is not writable; choose another")
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory; name a file")
    for source in inputs:
        if path.exists() and Path(source).exists() and path.samefile(source):
            raise ConfigError(f"{what} {path} is also an input; write to another file")
    return path
