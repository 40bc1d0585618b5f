"""eagerc.jit: PyTorch's TorchScript entry points, mapped to eagerc.compile where that is sound.

`torch.jit.script(fn_or_module)` compiles Python ahead of time; `torch.jit.trace(fn, example)`
records one run. Both are served by `eagerc.compile`, which traces on the first call, guards
on everything the trace depends on and retraces or runs eagerly when a guard fails -- so it
gives the eager result in every case `script` or `trace` would (and where `trace` would
silently bake in one path of Python control flow, it does not). The decorators that steer
TorchScript (`ignore`, `unused`, `export`, `interface`) and `annotate`/`Final` leave the
function as it is. Saving TorchScript archives is not supported: `jit.save`/`jit.load` raise
and point to `eagerc.export(...).save()` / `eagerc.runtime.load`, which write and read one
safe file.
"""
import typing

__all__ = ["script", "trace", "trace_module", "ignore", "unused", "export", "interface", "annotate",
           "is_scripting", "is_tracing", "Final", "save", "load", "freeze", "optimize_for_inference",
           "ScriptModule", "ScriptFunction"]

Final = typing.Final


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """A compiled version of a function, a Module or a Module class (`eagerc.compile`).
    Dicts, lists and plain Python objects pass through unchanged, as in PyTorch."""
    from .compiler.compile import compile as _compile
    if isinstance(obj, (dict, list)) or not callable(obj):
        return obj
    return _compile(obj)


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True):
    """`eagerc.compile(func)`, run once on the example inputs (as torch.jit.trace runs it)."""
    from .compiler.compile import compile as _compile
    compiled = _compile(func)
    if example_inputs is not None or example_kwarg_inputs is not None:
        args = example_inputs if isinstance(example_inputs, tuple) else (
            () if example_inputs is None else (example_inputs,))
        compiled(*args, **(example_kwarg_inputs or {}))
    return compiled


def trace_module(mod, inputs, **kwargs):
    """torch.jit.trace_module(mod, {"forward": example}): the compiled module."""
    return trace(mod, inputs.get("forward") if isinstance(inputs, dict) else None)


def _passthrough(fn=None, **kwargs):
    if fn is None:
        return lambda f: f
    return fn


ignore = unused = export = interface = _passthrough


def annotate(the_type, the_value):
    return the_value


def is_scripting():
    return False


def is_tracing():
    """True while eagerc.compile traces a function in this thread."""
    from . import dispatch
    return dispatch.active_tracer() is not None


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    return mod


def optimize_for_inference(mod, other_methods=None):
    return mod


def _no_archives(name):
    raise RuntimeError(f"eagerc.jit.{name}: TorchScript archives are not supported; save a model with "
                       "eagerc.export(model, example_args).save(path) and run it with eagerc.runtime.load(path) "
                       "(one safe file, no code executed), or its weights with eagerc.save(model.state_dict(), path)")


def save(m, f, _extra_files=None):
    _no_archives("save")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    _no_archives("load")


class ScriptModule:
    """Only for isinstance checks: nothing eagerc returns is a ScriptModule."""


class ScriptFunction:
    """Only for isinstance checks: nothing eagerc returns is a ScriptFunction."""
