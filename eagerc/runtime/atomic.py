"""Atomic file writes: a crash mid-write leaves the old file intact.

The data goes to a temporary file in the target's directory, which is fsync'ed, given the
old file's permissions (or the umask's), and renamed over the target; then the directory
is fsync'ed so the rename itself survives a power cut (where the platform allows).
"""
import os
import tempfile

__all__ = ["atomic_write"]


def atomic_write(path, write, what="write"):
    """Call write(fileobj) into a temporary file, then replace `path` with it."""
    path = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what}: {path} is a directory")
    if os.path.exists(path):
        mode = os.stat(path).st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
