"""RNN, LSTM, GRU and their one-step cells, as torch.nn.modules.rnn.

PyTorch's parameter names and shapes (`weight_ih_l{k}[_reverse]`, `weight_hh_...`, `bias_ih_...`,
`bias_hh_...`, `weight_hr_...` for LSTM's proj_size), gate order (LSTM i, f, g, o; GRU r, z, n)
and initialisation (every parameter U(-1/sqrt(hidden), 1/sqrt(hidden))), so a PyTorch state_dict
loads as is. The layer loop and the fused gate ops live in nn/functional_rnn.py; this file holds
the parameters, the argument handling (batch_first, unbatched input, initial states, packed
sequences, bidirectional layers, dropout between layers) and PyTorch's reprs.
"""
import math
import numbers
import warnings

from ...ops.creation import empty, zeros
from ...ops.joining import cat, stack
from .. import functional as F, init
from ..functional_rnn import gru_cell, lstm_cell, recurrent_layer, rnn_relu_cell, rnn_tanh_cell
from ..parameter import Parameter
from ..utils.rnn import PackedSequence
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _permute_hidden(hx, permutation):
    """Reorder the batch dimension (1) of a state (a tensor, or LSTM's (h, c))."""
    if permutation is None:
        return hx
    if isinstance(hx, tuple):
        return tuple(h.index_select(1, permutation) for h in hx)
    return hx.index_select(1, permutation)


class RNNBase(Module):
    """The shared layer stack of RNN, LSTM and GRU (PyTorch's constructor and attributes)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        if (not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool)):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input = input_size if layer == 0 else real_hidden * num_directions
                suffix = "_reverse" if direction == 1 else ""
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                names = []
                for base, shape in shapes:
                    name = f"{base}_l{layer}{suffix}"
                    setattr(self, name, Parameter(empty(shape, device=device, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self):
        """A no-op: PyTorch compacts weights for cuDNN here; eagerc's layers read them where they are."""

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def _layer_weights(self, layer, direction):
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = lambda base: getattr(self, base + suffix, None)  # noqa: E731
        return (get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"),
                get("weight_hr") if self.proj_size > 0 else None)

    def _state_shape(self, batch, size):
        return (self.num_layers * (2 if self.bidirectional else 1), batch, size)

    def _check_hidden(self, h, shape, what="hidden"):
        if tuple(h.shape) != tuple(shape):
            raise RuntimeError(f"Expected {what} size {tuple(shape)}, got {list(h.shape)}")

    def _states(self, hx, input, batch):
        """The initial state as a tuple of (layers * directions, B, size) tensors."""
        sizes = [self.proj_size or self.hidden_size] + ([self.hidden_size] if self.mode == "LSTM" else [])
        if hx is None:
            return tuple(zeros(self._state_shape(batch, n), dtype=input.dtype, device=input.device)
                         for n in sizes)
        hx = tuple(hx) if self.mode == "LSTM" else (hx,)
        for h, n, what in zip(hx, sizes, ("hidden", "cell")):
            self._check_hidden(h, self._state_shape(batch, n), what)
        return hx

    def _run(self, input, states, batch_sizes):
        """Every layer, both directions: (output, final states stacked like the initial ones)."""
        num_directions = 2 if self.bidirectional else 1
        finals = [[] for _ in states]
        x = input
        for layer in range(self.num_layers):
            outs = []
            for direction in range(num_directions):
                k = layer * num_directions + direction
                out, state = recurrent_layer(self.mode, x, tuple(s[k] for s in states),
                                             self._layer_weights(layer, direction), direction == 1, batch_sizes)
                outs.append(out)
                for f, s in zip(finals, state):
                    f.append(s)
            x = outs[0] if num_directions == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, tuple(stack(f) for f in finals)

    def forward(self, input, hx=None):
        name = type(self).__name__
        if isinstance(input, PackedSequence):
            data, batch_sizes, sorted_indices, unsorted_indices = input
            batch_sizes = [int(n) for n in batch_sizes.tolist()]
            if hx is not None:
                hx = _permute_hidden(hx, sorted_indices)
            states = self._states(hx, data, batch_sizes[0])
            out, states = self._run(data, states, batch_sizes)
            hidden = states if self.mode == "LSTM" else states[0]
            return (PackedSequence(out, input.batch_sizes, sorted_indices, unsorted_indices),
                    _permute_hidden(hidden, unsorted_indices))
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        batched = input.ndim == 3
        if hx is not None:
            hs = hx if self.mode == "LSTM" else (hx,)
            if any(h.ndim != input.ndim for h in hs):
                raise RuntimeError(f"For {'batched' if batched else 'unbatched'} {input.ndim}-D input, hx should also "
                                   f"be {input.ndim}-D but got {hs[0].ndim}-D tensor")
        if not batched:
            input = input.unsqueeze(1)
            if hx is not None:
                hx = tuple(h.unsqueeze(1) for h in hs) if self.mode == "LSTM" else hx.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        states = self._states(hx, input, input.shape[1])
        out, states = self._run(input, states, None)
        if not batched:
            out, states = out.squeeze(1), tuple(s.squeeze(1) for s in states)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, (states if self.mode == "LSTM" else states[0])

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)


class LSTM(RNNBase):
    """LSTM (gates i, f, g, o), with optional projection of h (proj_size)."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """GRU (gates r, z, n): n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """One time step: weight_ih (gates * hidden, input), weight_hh (gates * hidden, hidden), biases."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, device=device, dtype=dtype))
        for name in ("bias_ih", "bias_hh"):
            self.register_parameter(name, Parameter(empty(num_chunks * hidden_size, device=device, dtype=dtype))
                                    if bias else None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _batched(self, input, hx):
        """(input as (B, in), hx as (B, hidden) tensors or None, whether the input had a batch dim)."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} expected {self.input_size}")
        hs = () if hx is None else (tuple(hx) if isinstance(hx, (tuple, list)) else (hx,))
        if any(h.ndim != input.ndim for h in hs):
            raise RuntimeError(f"{name}: Expected hidden to be {input.ndim}D, got {hs[0].ndim}D instead")
        for i, h in enumerate(hs):
            if h.shape[-1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got {h.shape[-1]}, expected "
                                   f"{self.hidden_size}")
        batched = input.ndim == 2
        if not batched:
            input, hs = input.unsqueeze(0), tuple(h.unsqueeze(0) for h in hs)
        def zero_state():
            return zeros(input.shape[0], self.hidden_size, dtype=input.dtype, device=input.device)
        return input, hs, zero_state, batched

    def _weights(self):
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        self.nonlinearity = nonlinearity
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hs, zero_state, batched = self._batched(input, hx)
        cell = rnn_tanh_cell if self.nonlinearity == "tanh" else rnn_relu_cell
        h = cell(input, hs[0] if hs else zero_state(), *self._weights())
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hs, zero_state, batched = self._batched(input, hx)
        h, c = lstm_cell(input, hs if hs else (zero_state(), zero_state()), *self._weights())
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hs, zero_state, batched = self._batched(input, hx)
        h = gru_cell(input, hs[0] if hs else zero_state(), *self._weights())
        return h if batched else h.squeeze(0)
