"""Grad modes: no_grad, enable_grad, set_grad_enabled, inference_mode.

The flag itself lives in `eagerc.dispatch` (per thread, read on every op); these
objects only flip it for the calling thread, as context managers or as decorators.
"""
import functools

from .. import dispatch

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled"]


def is_grad_enabled():
    return dispatch.grad_enabled()


class _GradMode:
    """Base for the context managers; subclasses say which mode they enter."""
    _mode = False

    def __enter__(self):
        self._prev = dispatch.grad_enabled()
        dispatch.set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        dispatch.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class _NoParamDecorator(_GradMode):
    """Also usable as a bare decorator, `@no_grad` (as in PyTorch), besides `@no_grad()`."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)

    def __init__(self, orig_func=None):
        pass


class no_grad(_NoParamDecorator):
    _mode = False


class enable_grad(_NoParamDecorator):
    _mode = True


class inference_mode(_GradMode):
    """Like no_grad (eagerc keeps no separate inference tensors)."""

    def __new__(cls, mode=True):
        if callable(mode):  # bare `@inference_mode`
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self._mode = not mode

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(not mode):
                return fn(*args, **kwargs)
        return wrapper


class set_grad_enabled(_GradMode):
    """Sets the mode at construction (usable as a plain call), restores on exit."""

    def __init__(self, mode):
        self._prev = dispatch.grad_enabled()
        self._mode = bool(mode)
        dispatch.set_grad_enabled(self._mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        dispatch.set_grad_enabled(self._prev)
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
