"""PyTorch's autocast op lists, per device, as data: the one place an op's autocast policy lives.

Categories (PyTorch's CastPolicy, aten/src/ATen/autocast_mode.{h,cpp}):

- "lower":   floating inputs (not float64) are cast to the region's low dtype (bfloat16 or
             float16) and the op runs there: matrix products, convolutions, recurrent layers.
- "fp32":    floating inputs are cast to float32: losses, reductions and functions that need
             range. PyTorch's "fp32_set_opt_dtype" ops (softmax, sum, cumsum... on CUDA) are
             here too: asking for a float32 result of a low-precision input gives the same
             numbers as casting the input first.
- "promote": inputs are cast to the widest floating dtype among them (float32 wins over the
             low dtype): cat and stack on CPU, atan2, index_put, scatter_add on CUDA.
- "banned":  refused under autocast (binary_cross_entropy on CUDA: unsafe, use the
             *_with_logits form).

Every other op runs in the dtypes it is given, with the usual type promotion (on CPU:
softmax, layer_norm, sum, exp... keep a bfloat16 input's dtype).

A name is either a declared primitive (runtime/ops; `apply` casts its inputs: the
attached trait `OpDef.autocast`), or a PyTorch-named frontend function that eagerc builds
from several primitives (mse_loss, addmm, scaled_dot_product_attention...), marked where it
is defined with `@autocast_op(name)`: its inputs are cast on entry and its body runs with
autocast off, as PyTorch's wrappers exclude the autocast key below them.
tests/test_op_parts.py checks that every name here is one or the other, and
tests/test_amp.py compares the output dtypes with PyTorch's own autocast when installed.

Names eagerc has that PyTorch composes from listed ops follow what PyTorch returns: einsum
(via bmm), conv1d (via conv2d), mm/bmm (via matmul) and nn.LSTM (PyTorch's
mkldnn_rnn_layer / eagerc's lstm_layer) are "lower" on CPU. PyTorch's list entries eagerc has
no op for (fft_*, linalg_*, cholesky, stft, grid_sampler, reflection/replication padding,
3-d pooling, the margin/embedding losses, ...) are left out until the op exists.
"""

__all__ = ["LISTS", "CATEGORIES", "DEVICES", "category"]

CATEGORIES = ("lower", "fp32", "promote", "banned")
DEVICES = ("cpu", "cuda")

LISTS = {
    # aten/src/ATen/autocast_mode.cpp, TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)
    "cpu": {
        "lower": ("matmul", "einsum", "linear", "addmm", "conv2d", "conv3d", "conv_transpose2d",
                  "conv_transpose3d", "lstm_layer", "scaled_dot_product_attention"),
        "fp32": ("prod", "quantile", "cdist", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
                 "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy",
                 "binary_cross_entropy_with_logits"),
        "promote": ("cat", "stack"),
        "banned": (),
    },
    # AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE
    # (aten/src/ATen/autocast_mode.h) and the banned binary_cross_entropy, for AutocastCUDA
    "cuda": {
        "lower": ("matmul", "einsum", "linear", "addmm", "conv2d", "conv3d", "conv_transpose2d",
                  "conv_transpose3d", "lstm_cell", "gru_cell", "lstm_layer", "scaled_dot_product_attention"),
        "fp32": ("exp", "expm1", "log", "log2", "log1p", "reciprocal", "rsqrt", "erfinv", "tan", "pow",
                 "softplus", "layer_norm", "group_norm", "cosine_similarity", "cdist", "logsumexp",
                 "upsample_nearest2d", "interpolate_axis", "norm",
                 "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
                 "binary_cross_entropy_with_logits",
                 # fp32_set_opt_dtype
                 "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum"),
        "promote": ("atan2", "index_put", "scatter_add"),
        "banned": ("binary_cross_entropy",),
    },
}

_BY_NAME = {}
for _dev, _cats in LISTS.items():
    for _cat, _names in _cats.items():
        for _n in _names:
            if _n in _BY_NAME.get(_dev, {}):
                raise ValueError(f"autocast lists: {_n!r} is listed twice for {_dev}")
            _BY_NAME.setdefault(_dev, {})[_n] = _cat


def category(device, name):
    """The autocast category of op or function `name` on `device` ("cpu"/"cuda"), or None."""
    return _BY_NAME.get(device, {}).get(name)


def names():
    """Every name on some list."""
    return {n for d in _BY_NAME.values() for n in d}


def attach(ops):
    """Give each declared op on a list its trait `autocast` = {device: category}."""
    for name in names():
        op = ops.get(name)
        if op is not None:
            op.autocast = {d: category(d, name) for d in DEVICES if category(d, name) is not None}
