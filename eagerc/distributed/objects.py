"""Object collectives: JSON-plain values between ranks, never pickle.

A pickled object from another process can run code when loaded; eagerc sends only what
`json` can write (dict with str keys, list, str, int, float, bool, None), as UTF-8 bytes
over the group's host (MPI) engine. Tuples arrive as lists, as JSON has no tuple.
"""
import json

import numpy as np

from .collectives import _start
from .group import _member

__all__ = ["broadcast_object_list", "all_gather_object"]


def _encode(obj, what):
    try:
        return np.frombuffer(json.dumps(obj, allow_nan=True).encode(), np.uint8)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: objects sent between ranks must be JSON-plain (dict with str keys, list, str, "
                        f"int, float, bool, None); eagerc never pickles them ({e})") from None


def _decode(buf):
    return json.loads(bytes(buf).decode())


def broadcast_object_list(object_list, src=0, group=None, device=None):
    """Replace object_list's items on every rank with rank `src`'s (same length everywhere)."""
    what = "broadcast_object_list"
    g = _member(group, what)
    if g is None:
        return
    root = g.group_rank(int(src), what)
    host = g.host or g.engine
    payload = _encode(list(object_list), what) if g.rank() == root else None
    n = np.array([0 if payload is None else payload.size], np.int64)
    _start(g, what, what, np.empty(len(object_list), np.uint8), root, lambda e: host.bcast(n, root), None, False)
    buf = payload if payload is not None else np.empty(int(n[0]), np.uint8)
    g.wait(host.bcast(buf, root), what)
    object_list[:] = _decode(buf)


def all_gather_object(object_list, obj, group=None):
    """object_list[i] = rank i's `obj`, on every rank."""
    what = "all_gather_object"
    g = _member(group, what)
    if g is None:
        return
    if len(object_list) != g.size():
        raise ValueError(f"{what}: object_list has {len(object_list)} items; the group has {g.size()} ranks")
    host = g.host or g.engine
    payload = _encode(obj, what)
    sizes = np.empty(g.size(), np.int64)
    mine = np.array([payload.size], np.int64)
    _start(g, what, what, None, -1, lambda e: host.allgather(mine, sizes), None, False)
    buf = np.empty(int(sizes.sum()), np.uint8)
    g.wait(host.allgatherv(payload, buf, [int(s) for s in sizes]), what)
    ends = np.cumsum(sizes)
    for i in range(g.size()):
        object_list[i] = _decode(buf[ends[i] - sizes[i]:ends[i]])
