"""DistributedDataParallel: one model replica per process, gradients averaged across them.

PyTorch's wrapper with the same behaviour: at construction every rank checks that it
holds the same parameters (shapes, dtypes) and takes rank 0's values (parameters and
buffers); each forward takes rank 0's buffers again (`broadcast_buffers`) and, when
gradients are to be synchronised this iteration, arms the Reducer (reducer.py), which
all-reduces gradient buckets while backward still runs. `no_sync()` (or
`require_backward_grad_sync = False`, as nanoGPT does) accumulates gradients locally
instead; the next synchronised backward averages the accumulated sum.

The wrapper is a Module holding the model as `module`, so `state_dict()` keys start with
"module." (as PyTorch's do: load them into `ddp.module`, or strip the prefix). A model
from `eagerc.compile(model)` works: its compiled forward is called, and `module` is the
model it wraps.
"""
import contextlib

from ... import dispatch
from ...distributed.group import world
from ...distributed.objects import all_gather_object
from ..modules.module import Module
from .reducer import Reducer, broadcast_coalesced, readiness_order

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, **unused):
        super().__init__()
        inner = getattr(module, "_orig_mod", module)  # a compiled model: keep the Module, call the compiled one
        if not isinstance(inner, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module (or a compiled one), got {type(module).__name__}")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element (one device per process)")
        self.module = inner
        self.__dict__["_call"] = module
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self.process_group = world(process_group, "DistributedDataParallel")
        named = [(n, p) for n, p in inner.named_parameters() if p.requires_grad]
        self._params = [p for _, p in named]
        if not self._params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter "
                               "that requires a gradient.")
        self._check_same_model()
        g = self.process_group
        broadcast_coalesced(g, list(inner.parameters()) + list(inner.buffers()), 0,
                            "DistributedDataParallel: broadcast of rank 0's parameters and buffers")
        cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        self.__dict__["reducer"] = Reducer(self._params, g, cap, find_unused_parameters,
                                           readiness_order([n for n, _ in named]))

    def _check_same_model(self):
        g = self.process_group
        if g.size() == 1:
            return
        mine = [[list(p.shape), str(p.dtype)] for p in self._params]
        every = [None] * g.size()
        all_gather_object(every, mine, group=g)
        for r, theirs in enumerate(every):
            if theirs != mine:
                raise RuntimeError(f"DistributedDataParallel expects the same model on every rank: rank "
                                   f"{g.ranks[g.rank()]} has {len(mine)} parameters {_short(mine)}, rank "
                                   f"{g.ranks[r]} has {len(theirs)} {_short(theirs)}")

    def forward(self, *inputs, **kwargs):
        reducer = self.reducer
        reducer.check_finished()
        if self.broadcast_buffers and self.require_forward_param_sync:
            broadcast_coalesced(self.process_group, list(self.module.buffers()), 0,
                                "DistributedDataParallel: broadcast of rank 0's buffers")
        out = self._call(*inputs, **kwargs)
        if dispatch.grad_enabled() and self.require_backward_grad_sync:
            reducer.prepare(out)
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally, without communication."""
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    def __getstate__(self):
        raise TypeError("DistributedDataParallel is not picklable: save `ddp.module.state_dict()` (or the "
                        "wrapper's state_dict, with its 'module.' prefix) instead")


def _short(shapes):
    text = ", ".join(f"{s} {d}" for s, d in shapes[:6])
    return f"[{text}{', ...' if len(shapes) > 6 else ''}]"
