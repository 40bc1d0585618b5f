"""Op-table entries: shape and movement ops (views, slicing, diagonals, flips, rolls, repeats).

References are plain numpy (indexing, np.moveaxis, np.tile, ...), never eagerc."""
import numpy as np

import eagerc
from eagerc.ops.shape import slice_dim
from optable import Case, grad2 as _grad2, integers


def _diag_embed(x, offset=0):
    """Matrices with x's last dimension on diagonal `offset`, by explicit loops."""
    n = x.shape[-1] + abs(offset)
    out = np.zeros(x.shape[:-1] + (n, n))
    for i in range(x.shape[-1]):
        r, c = (i, i + offset) if offset >= 0 else (i - offset, i)
        out[..., r, c] = x[..., i]
    return out


def _rot90(x, k):
    for _ in range(k % 4):  # one quarter turn: column j of the result is row n-1-j... numpy's convention
        x = np.rot90(x)
    return x


def _squeeze_dims(x, dims):
    dims = {d % max(x.ndim, 1) for d in dims}
    return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in dims and n == 1)))


def _slice_scatter(x, s):
    y = x.copy()
    y[:, 0::2] = s
    return y


def _diagonal_scatter(x, s):
    y = x.copy()
    for i in range(s.shape[0]):
        y[i, i + 1] = s[i]
    return y


def _tril(x, k=0):
    i, j = np.indices(x.shape[-2:])
    return np.where(j - i <= k, x, 0)


def _triu(x, k=0):
    i, j = np.indices(x.shape[-2:])
    return np.where(j - i >= k, x, 0)


def _narrow_grad2_ref(x):
    g = np.zeros_like(x)
    g[:, 1:3] = 3 * x[:, 1:3] ** 2
    return g


def _diag_grad2_ref(x):
    g = np.zeros_like(x)
    for i in range(min(x.shape)):
        g[i, i] = 3 * x[i, i] ** 2
    return g


def _repeat_grad2_ref(x):
    return 6 * 3 * x ** 2  # every element appears 2 * 3 times in x.repeat(2, 3)


CASES = [
    # reshape / view
    Case("reshape", lambda x: x.reshape(-1, 2), lambda x: x.reshape(-1, 2), [((3, 4),), ((2, 3, 2),), ((0, 2),)]),
    Case("reshape_tuple", lambda x: eagerc.reshape(x, (2, 3, 2)), lambda x: x.reshape(2, 3, 2), [((3, 4),), ((12,),)]),
    Case("reshape_0d", lambda x: x.reshape(1, 1), lambda x: x.reshape(1, 1), [((),), ((1,),)]),
    Case("reshape_to_0d", lambda x: x.reshape(()), lambda x: x.reshape(()), [((1, 1),), ((1,),)]),
    Case("view", lambda x: x.view(6, -1), lambda x: x.reshape(6, -1), [((3, 4),), ((2, 3, 2),)]),
    Case("view_as", lambda x, y: x.view_as(y), lambda x, y: x.reshape(y.shape), [((3, 4), (2, 6))]),
    Case("reshape_as", lambda x, y: x.reshape_as(y), lambda x, y: x.reshape(y.shape), [((3, 4), (12,))]),
    # expand / broadcast
    Case("expand", lambda x: x.expand(2, -1, 4), lambda x: np.broadcast_to(x, (2, x.shape[0], 4)),
         [((3, 1),), ((1, 4),), ((3, 4),), ((1, 1),)]),
    Case("expand_0d", lambda x: x.expand(2, 3), lambda x: np.broadcast_to(x, (2, 3)), [((),), ((1,),), ((3,),)]),
    Case("expand_empty", lambda x: x.expand(-1, 4), lambda x: np.broadcast_to(x, (x.shape[0], 4)),
         [((0, 1),), ((3, 1),)]),
    Case("expand_as", lambda x, y: x.expand_as(y), lambda x, y: np.broadcast_to(x, y.shape), [((3, 1), (2, 3, 4))]),
    Case("broadcast_to", lambda x: eagerc.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)),
         [((3, 1),), ((4,),), ((),)]),
    # permutations
    Case("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), [((2, 3, 4),), ((0, 3, 2),)]),
    Case("permute_neg", lambda x: eagerc.permute(x, (-1, 0)), lambda x: x.T, [((3, 4),), ((1, 4),)]),
    # grad=False: gradcheck's _contiguous_inputs turns 0-d inputs into shape (1,) (np.ascontiguousarray)
    Case("permute_0d", lambda x: x.permute() * 2, lambda x: x * 2, [((),)], grad=False),
    Case("transpose", lambda x: x.transpose(0, -1), lambda x: np.swapaxes(x, 0, -1),
         [((3, 4),), ((2, 3, 4),), ((0, 2),)]),
    Case("swapaxes", lambda x: eagerc.swapaxes(x, 1, 2), lambda x: np.swapaxes(x, 1, 2), [((2, 3, 4),)]),
    Case("t", lambda x: x.t() * 1, lambda x: x.T, [((3, 4),), ((3,),), ((),)]),
    Case("T", lambda x: x.T, lambda x: x.transpose(tuple(reversed(range(x.ndim)))), [((3, 4),), ((2, 3, 4),)]),
    Case("mT", lambda x: x.mT, lambda x: np.swapaxes(x, -2, -1), [((2, 3, 4),), ((3, 4),)]),
    Case("movedim", lambda x: eagerc.movedim(x, 0, -1), lambda x: np.moveaxis(x, 0, -1),
         [((2, 3, 4),), ((3, 4),), ((3,),)]),
    Case("movedim_multi", lambda x: x.movedim((0, 1), (2, 0)), lambda x: np.moveaxis(x, (0, 1), (2, 0)),
         [((2, 3, 4),), ((2, 3, 0, 1),)]),
    Case("moveaxis", lambda x: eagerc.moveaxis(x, -1, 0), lambda x: np.moveaxis(x, -1, 0), [((2, 3, 4),)]),
    # squeeze / unsqueeze / flatten
    Case("squeeze", lambda x: x.squeeze(), np.squeeze, [((1, 3, 1, 4),), ((),), ((1,),), ((0, 1),)]),
    Case("squeeze_dim", lambda x: x.squeeze(0), lambda x: _squeeze_dims(x, (0,)),
         [((1, 3),), ((3, 1),), ((),), ((1, 0),)]),
    Case("squeeze_neg", lambda x: eagerc.squeeze(x, -1), lambda x: _squeeze_dims(x, (-1,)),
         [((3, 1),), ((1, 3),), ((),)]),
    Case("squeeze_dims", lambda x: x.squeeze((0, -1)), lambda x: _squeeze_dims(x, (0, -1)),
         [((1, 3, 1),), ((1, 3, 4),), ((2, 1, 1),), ((1, 0, 1),)]),
    Case("unsqueeze", lambda x: x.unsqueeze(1), lambda x: np.expand_dims(x, 1), [((3, 4),), ((3,),), ((0, 2),)]),
    Case("unsqueeze_neg", lambda x: eagerc.unsqueeze(x, -1), lambda x: x[..., None], [((3, 4),), ((),)]),
    Case("unsqueeze_0d", lambda x: x.unsqueeze(0), lambda x: x.reshape(1), [((),)]),
    Case("flatten", lambda x: x.flatten(), lambda x: x.reshape(-1), [((2, 3, 4),), ((),), ((0, 3),), ((3,),)]),
    Case("flatten_range", lambda x: eagerc.flatten(x, 1), lambda x: x.reshape(x.shape[0], -1),
         [((2, 3, 4),), ((2, 0, 3),), ((2, 3),)]),
    Case("flatten_mid", lambda x: x.flatten(1, -2), lambda x: x.reshape(x.shape[0], -1, x.shape[-1]),
         [((2, 3, 4, 5),), ((2, 3, 4),)]),
    Case("ravel", lambda x: eagerc.ravel(x.mT), lambda x: np.swapaxes(x, -2, -1).reshape(-1), [((3, 4),)]),
    Case("unflatten", lambda x: x.unflatten(1, (2, -1)),
         lambda x: x.reshape(x.shape[:1] + (2, x.shape[1] // 2) + x.shape[2:]), [((3, 4),), ((3, 6, 2),)]),
    Case("unflatten_neg", lambda x: eagerc.unflatten(x, -1, (2, 2)), lambda x: x.reshape(x.shape[:-1] + (2, 2)),
         [((3, 4),), ((4,),), ((0, 4),)]),
    Case("contiguous", lambda x: x.t().contiguous(), lambda x: np.ascontiguousarray(x.T), [((3, 4),), ((0, 2),)]),
    Case("contiguous_noop", lambda x: x.contiguous() * 1, lambda x: x * 1, [((3, 4),)]),
    # slicing
    Case("narrow", lambda x: x.narrow(1, 1, 2), lambda x: x[:, 1:3], [((3, 4),), ((2, 5, 3),)]),
    Case("narrow_neg_start", lambda x: eagerc.narrow(x, 0, -2, 2), lambda x: x[-2:], [((3, 4),), ((5,),)]),
    Case("narrow_empty", lambda x: x.narrow(-1, 1, 0), lambda x: x[..., 1:1], [((3, 4),), ((2,),)]),
    Case("slice_step", lambda x: slice_dim(x, 1, 1, None, 2), lambda x: x[:, 1::2],
         [((3, 5),), ((2, 6, 2),), ((3, 0),)]),
    Case("slice_neg", lambda x: slice_dim(x, -1, -3, -1), lambda x: x[..., -3:-1], [((3, 5),), ((4,),), ((2, 1),)]),
    Case("slice_scatter", lambda x, s: eagerc.slice_scatter(x, s, 1, 0, None, 2), _slice_scatter,
         [((3, 5), (3, 3)), ((2, 2), (2, 1))]),
    Case("slice_scatter_method", lambda x, s: x.slice_scatter(s, start=1, end=3), lambda x, s: np.concatenate(
        [x[:1], s, x[3:]]), [((4, 2), (2, 2)), ((3,), (2,))]),
    # diagonals, triangles
    Case("diagonal", lambda x: x.diagonal(), lambda x: np.diagonal(x).copy(),
         [((3, 4),), ((4, 3),), ((2, 3, 4),), ((0, 3),)]),
    Case("diagonal_offset", lambda x: eagerc.diagonal(x, 1), lambda x: np.diagonal(x, 1).copy(),
         [((3, 4),), ((4, 3),), ((2, 2),), ((2, 0),)]),
    Case("diagonal_neg_offset", lambda x: x.diagonal(-1), lambda x: np.diagonal(x, -1).copy(), [((3, 4),), ((1, 3),)]),
    Case("diagonal_dims", lambda x: x.diagonal(0, -1, 0), lambda x: np.diagonal(x, 0, -1, 0).copy(),
         [((2, 3, 4),), ((3, 2, 3),)]),
    Case("diagonal_scatter", lambda x, s: eagerc.diagonal_scatter(x, s, 1), _diagonal_scatter,
         [((3, 4), (3,)), ((2, 5), (2,))]),
    Case("tril", lambda x: x.tril(), _tril, [((3, 4),), ((2, 3, 3),), ((0, 3),), ((4, 2),)]),
    Case("tril_k", lambda x: eagerc.tril(x, 1), lambda x: _tril(x, 1), [((3, 4),), ((2, 3, 3),)]),
    Case("triu", lambda x: x.triu(), _triu, [((3, 4),), ((2, 3, 3),), ((0, 3),)]),
    Case("triu_k", lambda x: eagerc.triu(x, -1), lambda x: _triu(x, -1), [((3, 4),), ((4, 2),)]),
    Case("tril_inplace", lambda x: (x * 1).tril_(-1), lambda x: _tril(x, -1), [((3, 4),)]),
    Case("triu_int", lambda x: x.triu(), lambda x: _triu(x),
         [((3, 4),)], make=(lambda rng, s: rng.integers(-5, 5, s),), grad=False),
    # flips, rolls, repeats
    Case("flip", lambda x: x.flip(0), lambda x: x[::-1] if x.ndim else x.copy(),
         [((3, 4),), ((3,),), ((),), ((0, 2),)]),
    Case("flip_dims", lambda x: eagerc.flip(x, (0, -1)), lambda x: x[::-1, ..., ::-1], [((2, 3, 4),), ((3, 4),)]),
    Case("flip_varargs", lambda x: x.flip(2, 1), lambda x: x[:, ::-1, ::-1], [((2, 3, 4),)]),
    Case("fliplr", lambda x: eagerc.fliplr(x), lambda x: x[:, ::-1], [((3, 4),), ((2, 3, 4),)]),
    Case("flipud", lambda x: x.flipud(), lambda x: x[::-1], [((3, 4),), ((3,),)]),
    Case("roll", lambda x: x.roll(1, 0), lambda x: np.concatenate([x[-1:], x[:-1]]), [((3, 4),), ((5,),), ((0, 2),)]),
    Case("roll_dims", lambda x: eagerc.roll(x, (1, -2), (0, -1)),
         lambda x: np.concatenate([x[-1:], x[:-1]])[..., list(range(2, x.shape[-1])) + [0, 1]],
         [((3, 4),), ((2, 3, 5),)]),
    Case("roll_flat", lambda x: x.roll(2),
         lambda x: np.concatenate([x.reshape(-1)[-2:], x.reshape(-1)[:-2]]).reshape(x.shape),
         [((3, 4),), ((5,),), ((2, 1),)]),
    Case("roll_0d", lambda x: x.roll(3), lambda x: x.copy(), [((),)]),
    Case("roll_big_shift", lambda x: x.roll(-7, 1), lambda x: x[:, [(i + 7) % x.shape[1] for i in range(x.shape[1])]],
         [((3, 4),), ((2, 5),)]),
    Case("repeat", lambda x: x.repeat(2, 1, 3), lambda x: np.tile(x, (2, 1, 3)),
         [((3, 4),), ((4,),), ((),), ((0, 2),)]),
    Case("repeat_zero", lambda x: x.repeat(0, 2), lambda x: np.zeros((0, 2 * x.shape[1])), [((3, 4),)]),
    Case("repeat_same_ndim", lambda x: x.repeat(2, 2), lambda x: np.concatenate([np.concatenate([x, x], 1)] * 2, 0),
         [((3, 4),), ((1, 2),)]),
    Case("tile", lambda x: eagerc.tile(x, (2,)), lambda x: np.concatenate([x, x], -1), [((3, 4),), ((3,),)]),
    Case("tile_more", lambda x: x.tile(2, 1, 2), lambda x: np.tile(x, (2, 1, 2)), [((3, 4),), ((3,),)]),
    Case("flip_dims_keyword", lambda x: x.flip(dims=(0, -1)), lambda x: x[::-1, ::-1], [((3, 4),), ((2, 3),)]),
    Case("flip_function_dims_keyword", lambda x: eagerc.flip(x, dims=[1]), lambda x: x[:, ::-1], [((3, 4),)]),
    Case("rot90", lambda x: eagerc.rot90(x), lambda x: _rot90(x, 1), [((3, 4),), ((3, 4, 2),), ((0, 2),)]),
    Case("rot90_k", lambda x: x.rot90(2, [1, 2]), lambda x: x[:, ::-1, ::-1], [((2, 3, 4),)]),
    Case("rot90_negative_k", lambda x: x.rot90(-1, (0, 1)), lambda x: _rot90(x, 3), [((3, 4),)]),
    Case("rot90_zero", lambda x: x.rot90(4), lambda x: x.copy(), [((3, 4),)]),
    Case("diag_vector", lambda x: eagerc.diag(x), np.diag, [((4,),), ((1,),), ((0,),)]),
    Case("diag_vector_offset", lambda x: x.diag(2), lambda x: np.diag(x, 2), [((3,),)]),
    Case("diag_vector_negative", lambda x: eagerc.diag(x, -1), lambda x: np.diag(x, -1), [((3,),)]),
    Case("diag_matrix", lambda x: eagerc.diag(x), np.diag, [((3, 4),), ((4, 3),)]),
    Case("diag_matrix_offset", lambda x: x.diag(-1), lambda x: np.diag(x, -1).copy(), [((3, 4),)]),
    Case("diag_embed", lambda x: eagerc.diag_embed(x), _diag_embed, [((2, 3),), ((4,),), ((2, 0),)]),
    Case("diag_embed_offset", lambda x: x.diag_embed(1), lambda x: _diag_embed(x, 1), [((2, 3),)]),
    Case("diag_embed_dims", lambda x: eagerc.diag_embed(x, -1, 0, 2), lambda x: np.moveaxis(_diag_embed(x, -1), -2, 0),
         [((2, 3),)]),
    Case("repeat_interleave", lambda x: eagerc.repeat_interleave(x, 2), lambda x: np.repeat(x, 2),
         [((3, 4),), ((),), ((0,),)]),
    Case("repeat_interleave_dim", lambda x: x.repeat_interleave(3, dim=1), lambda x: np.repeat(x, 3, axis=1),
         [((3, 4),), ((2, 1, 3),)]),
    Case("repeat_interleave_tensor", lambda x, r: x.repeat_interleave(r, dim=0), lambda x, r: np.repeat(x, r, axis=0),
         [((3, 4), (3,))], make=(None, integers(0, 3))),
    Case("repeat_interleave_counts", lambda r: eagerc.repeat_interleave(r),
         lambda r: np.repeat(np.arange(len(r)), r), [((4,),)], make=(integers(0, 3),), grad=False),
    Case("meshgrid_ij", lambda a, b: eagerc.meshgrid(a, b, indexing="ij"),
         lambda a, b: tuple(np.meshgrid(a, b, indexing="ij")), [((3,), (4,)), ((2,), ())]),
    Case("meshgrid_xy", lambda a, b, c: eagerc.meshgrid([a, b, c], indexing="xy"),
         lambda a, b, c: tuple(np.meshgrid(a, b, c, indexing="xy")), [((3,), (4,), (2,))]),
    # second derivatives through the scatter ops
    Case("narrow_grad2", _grad2(lambda x: x.narrow(1, 1, 2)), _narrow_grad2_ref, [((3, 4),)]),
    Case("diagonal_grad2", _grad2(lambda x: x.diagonal()), _diag_grad2_ref, [((3, 4),)]),
    Case("repeat_grad2", _grad2(lambda x: x.repeat(2, 3)), _repeat_grad2_ref, [((3, 4),)]),
    Case("flip_roll_grad2", _grad2(lambda x: x.flip(0).roll(1, 1)), lambda x: 3 * x ** 2, [((3, 4),)]),
    Case("tril_grad2", _grad2(lambda x: x.tril()), lambda x: 3 * _tril(x) ** 2, [((3, 4),)]),
]
