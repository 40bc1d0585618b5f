"""MultiheadAttention, with PyTorch's parameters, defaults and return values, and the
mask rules it shares with the Transformer layers (`canonical_mask`)."""
import warnings

from ...ops.creation import empty, zeros_like
from ...runtime import dtypes
from .. import functional as F, init
from ..parameter import Parameter
from .linear import Linear
from .module import Module

__all__ = ["MultiheadAttention"]


def canonical_mask(mask, mask_name, other, other_name, target_type, check_other=True):
    """PyTorch's mask convention, checked once at the entry of attention: a bool mask (True = may
    NOT attend) becomes the additive float mask (-inf there, 0 elsewhere) in the query's dtype; a
    float mask is used as given; any other dtype is an error. Passing one bool and one float mask
    together still works but warns, as in PyTorch (where it is deprecated)."""
    if mask is None:
        return None
    is_bool = mask.dtype == dtypes.bool
    if not is_bool and not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {mask_name} are supported, got {mask.dtype.name} "
                             f"of shape {tuple(mask.shape)}")
    if check_other and other is not None and other.dtype != mask.dtype:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for "
                      "both instead.", stacklevel=2)
    if is_bool:
        return zeros_like(mask, dtype=target_type).masked_fill(mask, float("-inf"))
    return mask


class NonDynamicallyQuantizableLinear(Linear):
    """The output projection's class name in PyTorch's repr."""


class MultiheadAttention(Module):
    """Attention over num_heads heads of embed_dim // num_heads channels each.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights). Inputs are
    (L, N, E) -- or (N, L, E) with batch_first=True, or unbatched (L, E). Bool masks
    mark positions that may NOT be attended (True = masked); float masks are added.
    weights are (N, L, S), averaged over heads (or (N, H, L, S)), or None when
    need_weights=False."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {"device": device, "dtype": dtype}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        self.register_parameter("in_proj_bias", Parameter(empty(3 * embed_dim, **kw)) if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        key_padding_mask = canonical_mask(key_padding_mask, "key_padding_mask", attn_mask, "attn_mask", query.dtype)
        attn_mask = canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, check_other=False)
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:  # (N, L, E) -> (L, N, E), keeping query is key is value for self-attention
            if key is value:
                if query is key:
                    query = key = value = query.transpose(0, 1)
                else:
                    query, key = query.transpose(0, 1), key.transpose(0, 1)
                    value = key
            else:
                query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.out_proj.weight,
            self.out_proj.bias, self.dropout, self.training, key_padding_mask, need_weights, attn_mask,
            average_attn_weights, is_causal, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        if unbatched:
            return out.squeeze(1), (weights.squeeze(0) if weights is not None else None)
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, weights
