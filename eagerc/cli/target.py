"""`package.module:callable` targets: import, build, trace (eval mode, no_grad).

The callable may be an `nn.Module` subclass (built with no arguments), a Module instance,
a factory (a callable without required arguments that returns a Module or a function),
or the function to trace itself (a callable with required arguments).
"""
import importlib
import inspect
import os
import sys

from .common import CommandError, UsageError, one_line

__all__ = ["is_target", "Target", "load_target"]


def is_target(text):
    """A `module:callable` spec rather than a file path."""
    if os.path.exists(text):
        return False
    mod, sep, attr = text.partition(":")
    return bool(sep) and bool(attr) and all(p.isidentifier() for p in mod.split(".") + attr.split("."))


class Target:
    """A traced callable: the graph per stage, its weights, example inputs, module classes."""

    def __init__(self, name, fn, roots, inputs):
        self.name = name
        self.fn = fn
        self.roots = roots              # [(name prefix, Module)]
        self.inputs = inputs            # numpy arrays
        self.graph = None               # the traced graph
        self.weights = {}               # external name -> numpy array
        self.classes = {}               # module path -> class name
        self.arg_labels = {}            # "arg0" -> parameter name

    def stage(self, stage):
        """The graph at `stage`: traced, optimized (the pass pipeline that export runs) or fused
        (the whole pipeline: graph.fusion_groups and the memory plan)."""
        from ..compiler import passes
        if stage == "traced":
            return self.graph
        if stage == "optimized":
            return passes.optimize(self.graph, passes=passes.CLEANUP + [passes.schedule])
        return passes.optimize(self.graph)


def _import(spec):
    modname, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:   # like `python -m`: the current directory
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(modname)
    except ImportError as e:
        raise CommandError(f"cannot import {modname!r}: {one_line(e)}") from None
    except Exception as e:
        raise CommandError(f"importing {modname!r} failed: {type(e).__name__}: {one_line(e)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CommandError(f"{spec}: {type(obj).__name__} {getattr(obj, '__name__', '?')!r} has no "
                               f"attribute {part!r}") from None
    return obj


def _required_args(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [p.name for p in sig.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _build(spec, obj):
    """-> (callable to trace, [(prefix, root Module)])."""
    from ..nn import Module
    if isinstance(obj, type) and issubclass(obj, Module):
        try:
            obj = obj()
        except Exception as e:
            raise CommandError(f"{spec}: cannot build {obj.__name__}() without arguments "
                               f"({type(e).__name__}: {one_line(e)}); point at a factory function instead") from None
    elif not isinstance(obj, Module):
        if not callable(obj):
            raise CommandError(f"{spec} is a {type(obj).__name__}, not a Module, a class or a function")
        if inspect.isclass(obj) or _required_args(obj) == []:   # a factory
            try:
                obj = obj()
            except Exception as e:
                raise CommandError(f"{spec}(): {type(e).__name__}: {one_line(e)}") from None
            if not callable(obj):
                raise CommandError(f"{spec}() returned a {type(obj).__name__}, not a Module or a function")
    if isinstance(obj, Module):
        return obj, [("", obj)]
    from ..compiler.tracer import root_modules
    return obj, root_modules(obj)


def _param_names(fn, n):
    target = fn.forward if hasattr(fn, "forward") and not inspect.isfunction(fn) else fn
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}[{i}]" for i in range(n - len(names))]
            break
        names.append(p.name)
    return (names + [f"arg{i}" for i in range(len(names), n)])[:n]


def load_target(spec, shapes, dtypes_):
    """Import and trace `spec` on random inputs of `shapes`/`dtypes_` (eval mode, no_grad)."""
    from .. import dispatch
    from ..autograd import no_grad
    from ..compiler.tracer import GraphBreak, trace
    from .common import random_inputs
    if not shapes:
        raise UsageError(f"{spec}: give the example input sizes with --input-shape (e.g. --input-shape 1,3,32,32), "
                         "once per argument")
    if len(dtypes_) not in (1, len(shapes)):
        raise UsageError(f"--dtype given {len(dtypes_)} times for {len(shapes)} --input-shape; give it once "
                         "(for every input) or once per input")
    dtypes_ = dtypes_ * len(shapes) if len(dtypes_) == 1 else dtypes_
    fn, roots = _build(spec, _import(spec))
    arrays = random_inputs(shapes, dtypes_)
    target = Target(spec.partition(":")[2], fn, roots, arrays)
    names, paths = {}, {}
    for prefix, root in roots:
        for n, p in root.named_parameters():
            names.setdefault(id(p), prefix + n)
        for n, b in root.named_buffers():
            names.setdefault(id(b), prefix + n)
        for n, m in root.named_modules():
            path = prefix + n if n else prefix[:-1] or type(m).__name__
            paths.setdefault(id(m), path)
            target.classes.setdefault(path, type(m).__name__)
    flags = [(m, m.training) for _, root in roots for m in root.modules()]
    args = tuple(dispatch.wrap(a) for a in arrays)
    try:
        for m, _ in flags:
            m.training = False
        with no_grad():
            graph, _, tracer = trace(fn, args, {}, names, paths or None, fullgraph=True)
    except GraphBreak as e:
        raise CommandError(f"{spec} cannot be drawn as one graph: {e.what} at {e.location}") from None
    except Exception as e:
        raise CommandError(f"{spec} failed on inputs of shapes "
                           f"{', '.join(str(list(s)) for s in shapes)}: {type(e).__name__}: {one_line(e)}") from None
    finally:
        for m, training in flags:
            m.training = training
    target.graph = graph
    target.weights = {v.name: _host(tracer.externals[v.name]._array) for v in graph.externals()}
    target.arg_labels = {f"arg{i}": n for i, n in enumerate(_param_names(fn, len(arrays)))}
    return target


def _host(a):
    import numpy as np
    return a if isinstance(a, np.ndarray) else a.get()
