"""Flatten nested Python structures to leaves and a JSON-plain tree, and back.

The tree format is the graph's `out_tree`: {"t": i} (leaf i), {"c": value} (a constant),
{"tuple": [...]}, {"list": [...]}, {"dict": [[key, tree], ...]}, {"none": None}.
Leaves are whatever `is_leaf` accepts (tensors or arrays).
"""

__all__ = ["flatten", "unflatten"]


def flatten(obj, is_leaf):
    leaves = []

    def walk(x):
        if is_leaf(x):
            leaves.append(x)
            return {"t": len(leaves) - 1}
        if x is None:
            return {"none": None}
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return {"tuple": [walk(v) for v in x]}
        if isinstance(x, list):
            return {"list": [walk(v) for v in x]}
        if isinstance(x, dict):
            return {"dict": [[k, walk(v)] for k, v in x.items()]}
        if isinstance(x, tuple):  # namedtuple: rebuilt as a plain tuple
            return {"tuple": [walk(v) for v in x]}
        if isinstance(x, (bool, int, float, str)):
            return {"c": x}
        raise TypeError(f"cannot flatten a {type(x).__name__} (supported: tensors, numbers, strings, "
                        "None, tuples, lists, dicts)")
    return leaves, walk(obj)


def unflatten(tree, leaves):
    (kind, val), = tree.items()
    if kind == "t":
        return leaves[val]
    if kind == "none":
        return None
    if kind == "c":
        return val
    if kind == "tuple":
        return tuple(unflatten(t, leaves) for t in val)
    if kind == "list":
        return [unflatten(t, leaves) for t in val]
    if kind == "dict":
        return {k: unflatten(t, leaves) for k, t in val}
    raise ValueError(f"unknown tree kind {kind!r}")
