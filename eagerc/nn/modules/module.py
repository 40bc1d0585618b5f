"""Module: the base class of every layer, with PyTorch's bookkeeping.

A Module keeps three ordered dicts -- `_parameters`, `_buffers`, `_modules` -- filled
by attribute assignment (`self.fc = Linear(...)`, `self.w = Parameter(...)`) and read
back by `__getattr__`. Everything else (parameters(), state_dict(), to(), train(),
repr) walks those dicts. `__call__` is the hot path: without hooks it is a single
call of `forward`.
"""
import functools
import itertools
from collections import OrderedDict, namedtuple

from ... import dispatch
from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ...runtime import dtypes
from ..parameter import Parameter, Buffer

__all__ = ["Module", "RemovableHandle", "register_module_forward_pre_hook", "register_module_forward_hook"]

# How many times any Module's attributes, parameters, buffers, submodules or hooks changed.
# Compiled code (eagerc/compiler/guards.py) compares it before every call: while it has not
# moved, no module can differ from the one a graph was traced with. `training` is not
# counted: it is part of the compiled call's key.
state_epoch = [0]


class _Members(OrderedDict):
    """The ordered dicts of a Module's members and hooks: every change moves state_epoch."""

    def __setitem__(self, key, value):
        state_epoch[0] += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        state_epoch[0] += 1
        super().__delitem__(key)

    def _changed(name):
        def method(self, *args, **kwargs):
            state_epoch[0] += 1
            return getattr(OrderedDict, name)(self, *args, **kwargs)
        method.__name__ = name
        return method

    clear = _changed("clear")
    pop = _changed("pop")
    popitem = _changed("popitem")
    setdefault = _changed("setdefault")
    update = _changed("update")
    move_to_end = _changed("move_to_end")
    del _changed


_global_forward_pre_hooks = _Members()
_global_forward_hooks = _Members()


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Returned by register_*_hook: `.remove()` (or leaving a `with` block) unregisters the hook."""
    _next_id = itertools.count()

    def __init__(self, hooks_dict):
        self._hooks = hooks_dict
        self.id = next(RemovableHandle._next_id)

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _register(hooks, hook, prepend):
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def register_module_forward_pre_hook(hook):
    """A pre-hook run before every Module's forward (all modules)."""
    return _register(_global_forward_pre_hooks, hook, False)


def register_module_forward_hook(hook):
    """A hook run after every Module's forward (all modules)."""
    return _register(_global_forward_hooks, hook, False)


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


class Module:
    """Base class for all neural network modules; subclasses define `forward`."""

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = _Members()
        d["_buffers"] = _Members()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = _Members()
        d["_forward_pre_hooks"] = _Members()
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_forward_hooks"] = _Members()
        d["_forward_hooks_with_kwargs"] = set()
        d["_forward_hooks_always_called"] = set()
        d["_state_dict_hooks"] = _Members()
        d["_load_state_dict_pre_hooks"] = _Members()
        d["_backward_hooks"] = _Members()
        d["_backward_pre_hooks"] = _Members()
        tracer = dispatch.active_tracer()
        if tracer is not None:  # made while a compiled function is traced: its own to set up
            tracer.made_modules.add(id(self))

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # ------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks or self._forward_hooks or _global_forward_hooks or _global_forward_pre_hooks \
                or self._backward_hooks or self._backward_pre_hooks:
            return self._call_with_hooks(args, kwargs)
        return self.forward(*args, **kwargs)

    def _call_with_hooks(self, args, kwargs):
        backward = None
        if (self._backward_hooks or self._backward_pre_hooks) and dispatch.grad_enabled():
            from ._backward_hooks import BackwardHooks
            backward = BackwardHooks(self)
        for hook_id, hook in itertools.chain(_global_forward_pre_hooks.items(), self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {result!r}.")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        if backward is not None:
            args = backward.inputs(args)
        try:
            output = self.forward(*args, **kwargs)
        except Exception:
            for hook_id, hook in self._forward_hooks.items():
                if hook_id in self._forward_hooks_always_called:
                    try:
                        hook(self, args, None)
                    except Exception:
                        pass
            raise
        for hook_id, hook in itertools.chain(_global_forward_hooks.items(), self._forward_hooks.items()):
            if hook_id in self._forward_hooks_with_kwargs:
                result = hook(self, args, kwargs, output)
            else:
                result = hook(self, args, output)
            if result is not None:
                output = result
        if backward is not None:
            output = backward.outputs(output)
        return output

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) -> None or new args; with_kwargs: hook(module, args, kwargs) -> None or (args, kwargs)."""
        handle = _register(self._forward_pre_hooks, hook, prepend)
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs.add(handle.id)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """hook(module, args, output) -> None or a new output (hook(module, args, kwargs, output) with_kwargs)."""
        handle = _register(self._forward_hooks, hook, prepend)
        if with_kwargs:
            self._forward_hooks_with_kwargs.add(handle.id)
        if always_call:
            self._forward_hooks_always_called.add(handle.id)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input, called once per
        backward pass with the gradients of the module's tensor inputs and outputs (None for
        those that need none), as in PyTorch."""
        return _register(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output, before grad_input is computed."""
        return _register(self._backward_pre_hooks, hook, prepend)

    register_backward_hook = register_full_backward_hook

    # ------------------------------------------------------------ registration
    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(self, name, "parameter", self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(eagerc.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(self, name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(eagerc Tensor or None required)")
        if isinstance(tensor, Buffer):
            persistent = tensor.persistent
            tensor = dispatch.wrap(tensor._array, tensor.requires_grad)   # a plain Tensor sharing its memory
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name or name == "":
            raise KeyError(f"module name can't contain \".\" or be empty, got: {name!r}")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if item not in mod._modules:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters:
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return mod._parameters[name]

    def get_buffer(self, target):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # ------------------------------------------------------------ attributes
    def __getattr__(self, name):
        d = self.__dict__
        if "_parameters" in d:
            p = d["_parameters"]
            if name in p:
                return p[name]
            b = d["_buffers"]
            if name in b:
                return b[name]
            m = d["_modules"]
            if name in m:
                return m[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        d = self.__dict__
        if _current(d, name) is not value:  # (`self.count += 1` on a buffer sets the same tensor again)
            if name != "training":
                state_epoch[0] += 1
            tracer = dispatch.active_tracer()
            if tracer is not None and id(self) not in tracer.made_modules:
                tracer.side_effect(f"setting {type(self).__name__}.{name}")
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_from(d, name, exclude="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(eagerc.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if "_modules" not in d:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_from(d, name, exclude="_modules")
            d["_modules"][name] = value
        elif "_modules" in d and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(eagerc.nn.Module or None expected)")
            d["_modules"][name] = value
        elif isinstance(value, Buffer):
            _remove_from(d, name, exclude="_buffers")
            self.register_buffer(name, value)
        elif "_buffers" in d and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(eagerc Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        d = self.__dict__
        state_epoch[0] += 1
        tracer = dispatch.active_tracer()
        if tracer is not None and id(self) not in tracer.made_modules:
            tracer.side_effect(f"deleting {type(self).__name__}.{name}")
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                del d[key][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = set(dir(type(self))) | set(self.__dict__) | set(self._parameters) | set(self._modules) \
            | set(self._buffers)
        return sorted(k for k in keys if not k[0].isdigit())

    def __setstate__(self, state):
        self.__dict__.update(state)
        for key in ("_backward_hooks", "_backward_pre_hooks"):
            self.__dict__.setdefault(key, _Members())

    # ------------------------------------------------------------ traversal
    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (module_prefix + ("." if module_prefix else "") + k, v)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def named_children(self):
        memo = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def children(self):
        return (m for _, m in self.named_children())

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    # ------------------------------------------------------------ modes
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach()
                p.grad.zero_()

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ devices and dtypes
    def _apply(self, fn, recurse=True):
        """Replace every parameter's and buffer's array by fn(tensor) in place, keeping the
        Parameter objects (optimizers hold them) and moving their .grad along."""
        if recurse:
            for m in self.children():
                m._apply(fn)
        with no_grad():
            for key, p in self._parameters.items():
                if p is None:
                    continue
                new = fn(p)
                if new is not p:
                    p._array = new._array
                    p._vc = None
                if p.grad is not None:
                    g = fn(p.grad)
                    if g is not p.grad:
                        p.grad = g.detach() if g.requires_grad else g
            for key, b in self._buffers.items():
                if b is not None:
                    new = fn(b)
                    if new is not b:
                        self._buffers[key] = new
        return self

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype), to(tensor): floating parameters and buffers
        take the dtype; everything takes the device. Returns self (changed in place)."""
        from ...ops.tensor_methods import _parse_to
        device, dtype = _parse_to(args, dict(kwargs))
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")

        def convert(t):
            return t.to(device, dtype if t.is_floating_point() else None) if dtype is not None else \
                (t.to(device) if device is not None else t)
        return self._apply(convert)

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def type(self, dst_type):
        return self._apply(lambda t: t.to(dst_type))

    def _cast_floating(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self):
        return self._cast_floating(dtypes.float32)

    def double(self):
        return self._cast_floating(dtypes.float64)

    def half(self):
        return self._cast_floating(dtypes.float16)

    def bfloat16(self):
        return self._cast_floating(dtypes.bfloat16)

    # ------------------------------------------------------------ state dict
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of every parameter and persistent buffer by dotted name (detached,
        sharing memory with the module's tensors)."""
        if args:  # the positional (destination, prefix, keep_vars) form
            destination = args[0]
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, {})
            if result is not None:
                destination = result
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        persistent = [(k, v) for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set]
        local = [(k, v) for k, v in self._parameters.items()] + persistent
        for name, param in local:
            if param is None:
                continue
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                try:
                    from ...ops.creation import tensor
                    value = tensor(value)
                except Exception:
                    error_msgs.append(f'While copying the parameter named "{key}", expected a tensor-like object '
                                      f"from checkpoint but received {type(value).__name__}")
                    continue
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {_size(value.shape)} from "
                                  f"checkpoint, the shape in current model is {_size(param.shape)}.")
                continue
            try:
                with no_grad():
                    param.copy_(value)
            except Exception as e:
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                                  f"{_size(param.shape)} and whose dimensions in the checkpoint are "
                                  f"{_size(value.shape)}, an exception occurred : {e.args}.")
        if strict:  # (load_state_dict always collects them; it raises only when strict)
            for key in state_dict:
                if key.startswith(prefix):
                    rest = key[len(prefix):]
                    name = rest.split(".", 1)[0]
                    if name not in self._modules and rest not in dict(local):
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy parameters and buffers from `state_dict` into this module (in place).

        Returns (missing_keys, unexpected_keys); with strict=True either being non-empty
        is an error, and a shape mismatch is always one (naming the key and both shapes)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        if assign:
            raise NotImplementedError("load_state_dict(assign=True) is not supported; it copies in place")
        missing, unexpected, errors = [], [], []
        state_dict = OrderedDict(state_dict)

        def load(module, prefix=""):
            module._load_from_state_dict(state_dict, prefix, {}, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
        load(self)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(_quoted(unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(_quoted(missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                self._get_name(), "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def register_state_dict_pre_hook(self, hook):
        raise NotImplementedError("state_dict pre-hooks are not supported")

    def _register_state_dict_hook(self, hook):
        return _register(self._state_dict_hooks, hook, False)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        if with_module:
            hook = functools.partial(hook, self)
        return _register(self._load_state_dict_pre_hooks, hook, False)

    # ------------------------------------------------------------ repr
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """The layer's configuration for repr (override in subclasses)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(" + key + "): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        main = self._get_name() + "("
        if len(extra_lines) == 1 and not child_lines:
            main += extra_lines[0]
        elif extra_lines or child_lines:
            main += "\n  " + "\n  ".join(extra_lines + child_lines) + "\n"
        return main + ")"


def _quoted(keys):
    return ", ".join(f'"{k}"' for k in keys)


def _size(shape):
    return f"eagerc.Size([{', '.join(str(s) for s in shape)}])"


def _check_name(module, name, what, table):
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise KeyError(f"{what} name can't contain \".\"")
    if name == "":
        raise KeyError(f"{what} name can't be empty string \"\"")
    if name not in table and (name in module.__dict__ or hasattr(type(module), name)):
        raise KeyError(f"attribute '{name}' already exists")
    for other in ("_parameters", "_buffers", "_modules"):
        t = module.__dict__.get(other)
        if t is not None and t is not table and name in t:
            raise KeyError(f"attribute '{name}' already exists")


_MISSING = object()


def _current(d, name):
    """What `module.name` holds now (a member or a plain attribute), or a unique sentinel."""
    for key in ("_parameters", "_buffers", "_modules"):
        members = d.get(key)
        if members is not None and name in members:
            return members[name]
    return d.get(name, _MISSING)


def _remove_from(d, name, exclude):
    d.pop(name, None)
    for key in ("_parameters", "_buffers", "_modules"):
        if key != exclude and key in d and name in d[key]:
            del d[key][name]
            if key == "_buffers":
                d["_non_persistent_buffers_set"].discard(name)
