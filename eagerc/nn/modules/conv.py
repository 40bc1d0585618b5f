"""Conv1d/2d/3d, ConvTranspose1d/2d/3d (PyTorch's signatures, defaults, initialisation
and repr)."""
import math

from ...ops.creation import empty
from .. import functional as F, init
from ..parameter import Parameter
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

_PADDING_STRINGS = {"same", "valid"}
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


def _ntuple(v, n):
    if isinstance(v, (tuple, list)):
        return tuple(v) if len(v) != 1 else tuple(v) * n
    return (v,) * n


class _ConvNd(Module):
    """Shared by every convolution layer: arguments, parameters and their init."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, transposed,
                 output_padding, groups, bias, padding_mode, device=None, dtype=None, n=2):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        kernel_size, stride, dilation = _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(dilation, n)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _ntuple(padding, n)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = _ntuple(output_padding, n)
        self.groups = groups
        self.padding_mode = padding_mode
        # F.pad's order: last dim first, (before, after) per dim
        if padding == "same":
            totals = [d * (k - 1) for d, k in zip(dilation, kernel_size)]
            pads = [(t // 2, t - t // 2) for t in totals]
        elif padding == "valid":
            pads = [(0, 0)] * n
        else:
            pads = [(p, p) for p in padding]
        self._reversed_padding_repeated_twice = tuple(v for before, after in reversed(pads) for v in (before, after))
        shape = (in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*shape, *kernel_size, device=device, dtype=dtype))
        self.register_parameter("bias", Parameter(empty(out_channels, device=device, dtype=dtype)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        # kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}"
        if self.padding != (0,) * len(self.padding):
            s += ", padding={padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**self.__dict__)


class _Conv(_ConvNd):
    """Conv1d/2d/3d: one signature; the subclass names its rank `_n`."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups,
                         bias, padding_mode, device, dtype, n=self._n)

    def _conv_forward(self, input, weight, bias):
        conv = getattr(F, f"conv{self._n}d")
        if self.padding_mode != "zeros":  # reflect, replicate, circular: pad explicitly, then convolve unpadded
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L): weight (C_out, C_in/groups, k)."""
    _n = 1


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W): weight (C_out, C_in/groups, kH, kW)."""
    _n = 2


class Conv3d(_Conv):
    """3-d convolution over (N, C_in, D, H, W): weight (C_out, C_in/groups, kD, kH, kW)."""
    _n = 3


class _ConvTransposeNd(_ConvNd):
    """ConvTranspose1d/2d/3d: one signature; the subclass names its rank `_n`."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple of ints")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, True, output_padding,
                         groups, bias, padding_mode, device, dtype, n=self._n)

    def forward(self, input, output_size=None):
        op = self._output_padding(input, output_size, self._n)
        return getattr(F, f"conv_transpose{self._n}d")(input, self.weight, self.bias, self.stride, self.padding,
                                                        op, self.groups, self.dilation)

    def _output_padding(self, input, output_size, n):
        """The output_padding that gives `output_size` (PyTorch's forward(input, output_size))."""
        if output_size is None:
            return self.output_padding
        output_size = tuple(output_size)[-n:]
        if len(output_size) != n:
            raise ValueError(f"ConvTranspose{n}D: output_size must have {n} or {n + 2} elements (got "
                             f"{len(output_size)})")
        spatial = input.shape[-n:]
        result = []
        for d in range(n):
            smallest = ((spatial[d] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            largest = smallest + self.stride[d] - 1
            if not smallest <= output_size[d] <= largest:
                raise ValueError(f"requested an output size of {list(output_size)}, but valid sizes range from "
                                 f"{smallest} to {largest} (for an input of {list(spatial)})")
            result.append(output_size[d] - smallest)
        return tuple(result)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution: weight (C_in, C_out/groups, k)."""
    _n = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution: weight (C_in, C_out/groups, kH, kW); output
    H = (H_in-1)*stride - 2*padding + dilation*(kH-1) + output_padding + 1."""
    _n = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution: weight (C_in, C_out/groups, kD, kH, kW)."""
    _n = 3
