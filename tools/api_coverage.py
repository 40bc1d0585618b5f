"""How much of PyTorch's public API eagerc has, namespace by namespace.

    python tools/api_coverage.py              # the table (README shows it)
    python tools/api_coverage.py --missing    # and the names eagerc lacks
    python tools/api_coverage.py --write-snapshot   # refresh eagerc/_torch_api.json from torch

PyTorch's names come from the installed torch when there is one (`pip install
torch==2.13.0`), else from the snapshot eagerc ships (eagerc/_torch_api.json, written by
--write-snapshot; eagerc's "not implemented yet" errors read it too). A name counts when
it is public and PyTorch's own: imported helpers (typing names, `math`, `warnings`, ...)
are left out.
"""
import argparse
import importlib
import json
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SNAPSHOT = os.path.join(ROOT, "eagerc", "_torch_api.json")

# PyTorch namespace -> where eagerc keeps the same names
NAMESPACES = [
    ("torch", "eagerc"),
    ("torch.nn", "eagerc.nn"),
    ("torch.nn.functional", "eagerc.nn.functional"),
    ("torch.Tensor", "eagerc.Tensor"),
    ("torch.optim", "eagerc.optim"),
    ("torch.optim.lr_scheduler", "eagerc.optim.lr_scheduler"),
    ("torch.utils.data", "eagerc.utils.data"),
]


def _resolve(path):
    """The object at a dotted path: a module, or an attribute of one (torch.Tensor)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        mod, _, attr = path.rpartition(".")
        return getattr(importlib.import_module(mod), attr)


def _own(ns, name, obj):
    """Is `name` one of namespace `ns`'s own public names (not an imported helper)?"""
    if name.startswith("_"):
        return False
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("torch.")
    mod = getattr(obj, "__module__", None)
    if isinstance(mod, str) and (mod == "typing" or mod.split(".")[0] in ("typing", "typing_extensions",
                                                                            "collections", "abc", "enum")):
        return False
    return True


def torch_names():
    """{namespace: [names]} from the installed torch, else from the shipped snapshot."""
    try:
        import torch  # noqa: F401
    except ImportError:
        with open(SNAPSHOT) as f:
            return json.load(f)["names"]
    out = {}
    for ns, _ in NAMESPACES:
        obj = _resolve(ns)
        names = []
        for n in dir(obj):
            try:
                v = getattr(obj, n)
            except Exception:
                continue
            if _own(ns, n, v):
                names.append(n)
        out[ns] = sorted(names)
    return out


def coverage(names=None):
    """[(torch namespace, eagerc namespace, have, total, missing names)]."""
    names = names or torch_names()
    rows = []
    for ns, ens in NAMESPACES:
        target = _resolve(ens)
        missing = [n for n in names[ns] if not hasattr(target, n)]
        rows.append((ns, ens, len(names[ns]) - len(missing), len(names[ns]), missing))
    return rows


def table(rows):
    lines = ["| PyTorch namespace | eagerc | names | share |", "|---|---|---|---|"]
    have = total = 0
    for ns, ens, h, t, _ in rows:
        lines.append(f"| `{ns}` | `{ens}` | {h} / {t} | {100 * h / max(t, 1):.0f}% |")
        have, total = have + h, total + t
    lines.append(f"| all | | {have} / {total} | {100 * have / max(total, 1):.0f}% |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missing", action="store_true", help="list the names eagerc lacks")
    ap.add_argument("--write-snapshot", action="store_true", help="write eagerc/_torch_api.json from torch")
    args = ap.parse_args(argv)
    names = torch_names()
    if args.write_snapshot:
        import torch
        with open(SNAPSHOT, "w") as f:
            json.dump({"torch_version": torch.__version__.split("+")[0], "names": names}, f, indent=0,
                      sort_keys=True)
            f.write("\n")
        print(f"wrote {SNAPSHOT}")
    rows = coverage(names)
    print(table(rows))
    if args.missing:
        for ns, _, _, _, missing in rows:
            print(f"\n{ns} ({len(missing)} missing):")
            print("  " + " ".join(missing))


if __name__ == "__main__":
    main()
