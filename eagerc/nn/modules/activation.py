"""Activation modules: thin wrappers over eagerc.nn.functional with PyTorch's reprs."""
from .. import functional as F
from .module import Module

__all__ = ["ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Mish", "ELU", "SELU", "CELU", "Softplus", "Softsign",
           "Tanh", "Sigmoid", "Hardtanh", "Hardsigmoid", "Hardswish", "LogSigmoid", "Tanhshrink", "Softmax",
           "Softmin", "LogSoftmax", "GLU"]


class _Inplace(Module):
    """An activation whose only argument is `inplace`: `_fn(input, inplace)`."""
    _fn = None

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    _fn = staticmethod(F.relu)


class ReLU6(_Inplace):
    _fn = staticmethod(F.relu6)


class SiLU(_Inplace):
    _fn = staticmethod(F.silu)


class Mish(_Inplace):
    _fn = staticmethod(F.mish)


class SELU(_Inplace):
    _fn = staticmethod(F.selu)


class Hardsigmoid(_Inplace):
    _fn = staticmethod(F.hardsigmoid)


class Hardswish(_Inplace):
    _fn = staticmethod(F.hardswish)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class GELU(Module):
    """x * Phi(x); approximate='tanh' uses the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class _Plain(Module):
    _fn = None

    def forward(self, input):
        return type(self)._fn(input)


class Tanh(_Plain):
    _fn = staticmethod(F.tanh)


class Sigmoid(_Plain):
    _fn = staticmethod(F.sigmoid)


class Softsign(_Plain):
    _fn = staticmethod(F.softsign)


class LogSigmoid(_Plain):
    _fn = staticmethod(F.logsigmoid)


class Tanhshrink(_Plain):
    _fn = staticmethod(F.tanhshrink)


class _DimModule(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def extra_repr(self):
        return f"dim={self.dim}"


class _SoftmaxLike(_DimModule):
    _fn = None

    def forward(self, input):
        return type(self)._fn(input, self.dim, _stacklevel=5)


class Softmax(_SoftmaxLike):
    _fn = staticmethod(F.softmax)


class Softmin(_SoftmaxLike):
    _fn = staticmethod(F.softmin)


class LogSoftmax(_SoftmaxLike):
    _fn = staticmethod(F.log_softmax)


class GLU(_DimModule):
    def __init__(self, dim=-1):
        super().__init__(dim)

    def forward(self, input):
        return F.glu(input, self.dim)


def __getattr__(name):  # MultiheadAttention lives in attention.py (torch exposes it from activation)
    if name == "MultiheadAttention":
        from .attention import MultiheadAttention
        return MultiheadAttention
    raise AttributeError(name)
