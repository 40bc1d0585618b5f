"""GradScaler: loss scaling for float16 training, PyTorch's torch.amp.GradScaler algorithm.

float16 gradients of small magnitude underflow to zero. The scaler multiplies the loss by a
large factor S before backward (`scale`), divides the gradients by S before the optimizer
uses them (`unscale_`, once per step), skips the step when any gradient is inf or nan
(`step`), and adapts S (`update`): after an overflow S *= backoff_factor and the growth
tracker restarts; after `growth_interval` clean steps in a row S *= growth_factor (kept
only if finite). The scale and the growth tracker are 0-d tensors on the device of the
outputs (float32 and int32, as PyTorch's), and the checks are tensor ops, so the same code
runs on numpy and cupy tensors; `step` reads one number (found inf or not) to decide, as
PyTorch's does.

`enabled=False` makes every method a passthrough (scale returns its input, step just calls
optimizer.step()). A "cuda" scaler on a machine without a GPU disables itself with
PyTorch's warning.
"""
import warnings
from collections import defaultdict
from enum import Enum

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad

__all__ = ["GradScaler", "OptState"]


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state():
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """Scales losses and unscales gradients for mixed-precision training (torch.amp.GradScaler)."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = str(device)
        self._enabled = bool(enabled)
        if self._enabled and self._device.startswith("cuda"):
            from ..runtime.device import cuda_available
            if not cuda_available():
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                              UserWarning, stacklevel=2)
                self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self._init_scale = float(init_scale)
        self._scale = None                # a float32 0-d tensor, made on the first scale()
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._init_growth_tracker = 0
        self._growth_tracker = None       # an int32 0-d tensor: clean steps since the last change
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _lazy_init_scale_growth_tracker(self, device):
        """Made on the first scale(). Inside a compiled call (eagerc.compile) they are made
        outside the trace, as an optimizer's first-step state is: tensors the graph reads and
        updates by reference at every call, not constants a compiled call would make afresh."""
        from .. import dispatch
        from ..ops.creation import full
        from ..runtime import dtypes
        tracer = dispatch.active_tracer()
        if tracer is not None:
            dispatch.set_tracer(None)
        try:
            self._scale = full((), self._init_scale, dtype=dtypes.float32, device=device)
            self._growth_tracker = full((), self._init_growth_tracker, dtype=dtypes.int32, device=device)
        finally:
            if tracer is not None:
                dispatch.set_tracer(tracer)
                tracer.made_outside([self._scale, self._growth_tracker])

    def _check_scale_growth_tracker(self, funcname):
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise RuntimeError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise RuntimeError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)
        return self._scale, self._growth_tracker

    def scale(self, outputs):
        """outputs (a tensor, or tensors in lists/tuples) multiplied by the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            return outputs * self._scale.to(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if hasattr(outputs, "__iter__"):
            return map(self.scale, outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        """Every grad *= inv_scale in place; found_inf (per device) = 1 if any grad is inf/nan."""
        per_device = {}
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if not allow_fp16 and g.dtype.name == "float16":
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    dev = str(g.device)
                    if dev not in per_device:
                        per_device[dev] = found_inf.to(g.device).clone()
                    bad = (~g.isfinite()).any().to(per_device[dev].dtype)
                    per_device[dev] = per_device[dev].maximum(bad)
                    g.mul_(inv_scale.to(g.device))
        return per_device

    def unscale_(self, optimizer):
        """Divide optimizer's gradients by the scale (in place); at most once between update()s."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        from ..ops.creation import full
        from ..runtime import dtypes
        inv_scale = self._scale.double().reciprocal().float()
        found_inf = full((), 0.0, dtype=dtypes.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """unscale_ (if not done yet), then optimizer.step(...) unless a gradient is inf or nan."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise RuntimeError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(v.item() for v in state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None):
        """Back off the scale after an overflow, grow it after growth_interval clean steps (or
        set it to `new_scale`, a float or a 1-element tensor); then a new iteration starts."""
        if not self._enabled:
            return
        scale, tracker = self._check_scale_growth_tracker("update")
        with no_grad():
            if new_scale is not None:
                if isinstance(new_scale, (int, float)):
                    scale.fill_(float(new_scale))
                else:
                    reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                              "torch.FloatTensor with requires_grad=False.")
                    if not (isinstance(new_scale, Tensor) and new_scale.numel() == 1
                            and not new_scale.requires_grad and new_scale.device.type == scale.device.type):
                        raise ValueError(reason)
                    scale.copy_(new_scale.reshape(()))
            else:
                found = [f.to(scale.device) for s in self._per_optimizer_states.values()
                         for f in s["found_inf_per_device"].values()]
                if not found:
                    raise RuntimeError("No inf checks were recorded prior to update.")
                self._update_scale_(scale, tracker, sum(found[1:], found[0]))
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _update_scale_(self, scale, tracker, found_inf):
        """PyTorch's _amp_update_scale_, as tensor ops (the products in float64, then rounded to
        float32, as its kernel computes float * double)."""
        from ..ops.elementwise import where
        inf = found_inf > 0
        successful = tracker + 1
        grown = (scale.double() * self._growth_factor).float()
        grow = (successful == self._growth_interval) & ~inf
        new_scale = where(inf, (scale.double() * self._backoff_factor).float(),
                          where(grow & grown.isfinite(), grown, scale))
        new_tracker = where(inf | grow, tracker * 0, successful.to(tracker.dtype))
        scale.copy_(new_scale)
        tracker.copy_(new_tracker)

    # ---------------------------------------------------------------- accessors
    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale.item()

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])
