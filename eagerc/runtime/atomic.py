"""Atomic file writes: a crash mid-write leaves the old file intact, and its debris is swept.

The data goes to a temporary file in the target's directory, which is fsync'ed, given the
old file's permissions (or the umask's), and renamed over the target; then the directory
is fsync'ed so the rename itself survives a power cut (where the platform allows).

A process killed mid-write leaves its temporary file behind. Its name says who wrote it,
`.<target>.<host>-<pid>.<random>.tmp`, so the next write to the same target removes the
ones whose writer is gone: written on this host by a process that no longer exists, or
(another host, an older eagerc's `.<target>.<random>.tmp`, a platform without a cheap
liveness test) not modified for STALE_AFTER seconds. A concurrent writer's file is kept.
"""
import os
import re
import socket
import tempfile
import time

__all__ = ["atomic_write", "remove_stale_temporaries", "STALE_AFTER"]

STALE_AFTER = 3600.0  # seconds without a modification after which any writer is presumed dead
_SUFFIX = ".tmp"
_TEMP = re.compile(r"(?:([A-Za-z0-9]+)-([0-9]+)\.)?[a-z0-9_]{8}\Z")  # [host-pid.]<mkstemp's 8 characters>


def _host():
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:48] or "host"


def atomic_write(path, write, what="write"):
    """Call write(fileobj) into a temporary file, then replace `path` with it."""
    path = os.path.realpath(os.fspath(path))
    directory, base = os.path.split(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what}: {path} is a directory")
    if os.path.exists(path):
        mode = os.stat(path).st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.{_host()}-{os.getpid()}.", suffix=_SUFFIX, dir=directory)
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


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        return True
    return True


def remove_stale_temporaries(path, now=None):
    """Remove the temporary files that killed writes to `path` left behind; returns their names."""
    directory, base = os.path.split(os.path.realpath(os.fspath(path)))
    prefix = f".{base}."
    host = _host()
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(_SUFFIX)):
            continue
        m = _TEMP.match(name[len(prefix):-len(_SUFFIX)])
        if m is None:  # not one of ours (another target's, say ".x.bak.<...>.tmp" beside "x")
            continue
        writer, pid = m.group(1), m.group(2)
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        if writer == host and os.name == "posix":
            stale = not _alive(int(pid))
        else:
            stale = now - info.st_mtime > STALE_AFTER
        if stale:
            try:
                os.unlink(entry.path)
                removed.append(name)
            except OSError:
                pass
    return removed


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
