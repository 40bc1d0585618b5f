"""Run a PyTorch program on eagerc unchanged: `python -m eagerc.alias script.py [args...]`.

`install()` puts an import finder first on `sys.meta_path` that answers `import torch` and
`import torch.a.b` with eagerc's module of the same path (`eagerc.a.b`). The module objects are
shared, not copied, so `torch.nn is eagerc.nn`, `isinstance(x, torch.Tensor)` holds for eagerc
tensors and a class defined against either name is the same class. A path eagerc lacks fails as
Python's own ModuleNotFoundError (so `try: import torch._dynamo / except ImportError` works),
naming the eagerc module it looked for.

Why a finder rather than filling `sys.modules` up front: a program may import any of PyTorch's
module paths, and eagerc's frontend loads lazily (docs/layout.md); the finder maps each path when
the program asks for it, and imports nothing else.
"""
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys

__all__ = ["install", "uninstall", "run"]


class TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import `alias` and `alias.x.y` as the modules `target` and `target.x.y`."""

    def __init__(self, alias="torch", target="eagerc"):
        self.alias, self.target = alias, target

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.alias or fullname.startswith(self.alias + "."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        real = self.target + spec.name[len(self.alias):]
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as e:
            if e.name != real:  # something inside eagerc failed to import: that error is the story
                raise
            parent, _, last = real.rpartition(".")
            module = getattr(sys.modules.get(parent), last, None)  # a namespace object, e.g. eagerc.cuda.amp
            if module is None:
                raise ModuleNotFoundError(f"No module named {spec.name!r}: eagerc has no {real!r} "
                                          f"(PyTorch's {spec.name} is not implemented in eagerc yet, "
                                          f"see docs/pytorch_compat.md)", name=spec.name) from None
        spec.loader_state = getattr(module, "__spec__", None)  # eagerc's own, for exec_module to put back
        return module

    def exec_module(self, module):
        # the import machinery set module.__spec__ to the alias's spec: give eagerc's module its own back
        alias_spec = getattr(module, "__spec__", None)
        real = getattr(alias_spec, "loader_state", None)
        if real is not None:
            try:
                module.__spec__ = real
            except AttributeError:
                pass


def install(alias="torch", target="eagerc"):
    """Make `import torch` (and every `torch.x.y`) give eagerc's modules; idempotent."""
    if not any(isinstance(f, TorchAlias) and f.alias == alias for f in sys.meta_path):
        if any(m == alias or m.startswith(alias + ".") for m in sys.modules):
            raise RuntimeError(f"eagerc.alias.install: {alias!r} is already imported; install the alias "
                               f"before the program's first `import {alias}`")
        sys.meta_path.insert(0, TorchAlias(alias, target))
    return importlib.import_module(alias)


def uninstall(alias="torch"):
    """Remove the finder and forget the aliased module names (eagerc's own modules stay loaded)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, TorchAlias) and f.alias == alias)]
    for name in [m for m in sys.modules if m == alias or m.startswith(alias + ".")]:
        del sys.modules[name]


def run(script, argv=()):
    """Run `script` as `__main__` with `torch` aliased, as `python script.py *argv` would."""
    install()
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m eagerc.alias script.py [args...]\n"
              "runs a PyTorch program with `import torch` giving eagerc (docs/pytorch_compat.md)")
        return 0 if argv else 2
    run(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
