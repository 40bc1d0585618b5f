"""Op-table entries: cat/stack and friends, and the splitting ops (split, chunk,
tensor_split, unbind), each piece a `slice` view. References are plain numpy."""
import numpy as np

import eagerc
from optable import Case, integers


def _split_ref(x, size, dim):
    n = x.shape[dim]
    idx = [slice(None)] * x.ndim
    out = []
    for a in range(0, max(n, 1), size):
        idx[dim] = slice(a, a + size)
        out.append(x[tuple(idx)])
    return tuple(out)


def _chunk_ref(x, chunks):  # along the last dim: pieces of ceil(n / chunks)
    n = x.shape[-1]
    if n == 0:
        return tuple(x[..., 0:0] for _ in range(chunks))
    size = -(-n // chunks)
    return tuple(x[..., a:a + size] for a in range(0, n, size))


def _cat_grad2(a, b):
    a = a if a.requires_grad else a.detach().requires_grad_()
    b = b if b.requires_grad else b.detach().requires_grad_()
    return eagerc.autograd.grad((eagerc.cat([a, b], 1) ** 3).sum(), (a, b), create_graph=True)


def _stack_grad2(a, b):
    a = a if a.requires_grad else a.detach().requires_grad_()
    b = b if b.requires_grad else b.detach().requires_grad_()
    return eagerc.autograd.grad((eagerc.stack([a, b], 1) ** 3).sum(), (a, b), create_graph=True)


def _unbind_grad2(x):
    x = x if x.requires_grad else x.detach().requires_grad_()
    pieces = x.unbind(1)
    loss = sum((p ** 3 * (i + 1)).sum() for i, p in enumerate(pieces))
    return eagerc.autograd.grad(loss, x, create_graph=True)[0]


CASES = [
    Case("cat", lambda a, b: eagerc.cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1),
         [((2, 3), (2, 5)), ((3, 2, 1), (3, 4, 1)), ((2, 0), (2, 4)), ((0, 3), (0, 1))]),
    Case("cat_dim0_three", lambda a, b, c: eagerc.cat((a, b, c)), lambda a, b, c: np.concatenate([a, b, c]),
         [((1, 3), (2, 3), (0, 3)), ((2,), (1,), (3,))]),
    Case("cat_neg_dim", lambda a, b: eagerc.cat([a, b], -1), lambda a, b: np.concatenate([a, b], -1),
         [((2, 3, 1), (2, 3, 2)), ((3,), (4,))]),
    Case("cat_single", lambda a: eagerc.cat([a], 0), lambda a: a.copy(), [((2, 3),)]),
    Case("cat_promote", lambda a, b: eagerc.cat([a, b]), lambda a, b: np.concatenate([a, b.astype(a.dtype)]),
         [((2, 3), (1, 3))], make=(None, integers())),
    Case("cat_int", lambda a, b: eagerc.cat([a, b], 1), lambda a, b: np.concatenate([a, b], 1),
         [((2, 3), (2, 1))], make=(integers(), integers()), grad=False),
    Case("cat_legacy_empty", lambda a, b: eagerc.cat([a, b], 1), lambda a, b: a.copy(), [((2, 3), (0,))]),
    Case("concat", lambda a, b: eagerc.concat([a, b], 0), lambda a, b: np.concatenate([a, b]), [((1, 3), (2, 3))]),
    Case("concatenate", lambda a, b: eagerc.concatenate((a, b), dim=1), lambda a, b: np.concatenate([a, b], 1),
         [((2, 1), (2, 3))]),
    Case("stack", lambda a, b: eagerc.stack([a, b], -1), lambda a, b: np.stack([a, b], -1),
         [((2, 3), (2, 3)), ((), ()), ((0, 2), (0, 2))]),
    Case("stack_three", lambda a, b, c: eagerc.stack((a, b, c)), lambda a, b, c: np.stack([a, b, c]),
         [((2, 3), (2, 3), (2, 3)), ((4,), (4,), (4,))]),
    Case("stack_mid", lambda a, b: eagerc.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), [((2, 3), (2, 3))]),
    Case("stack_promote", lambda a, b: eagerc.stack([a, b]), lambda a, b: np.stack([a, b.astype(a.dtype)]),
         [((3,), (3,))], make=(None, integers())),
    Case("hstack", lambda a, b: eagerc.hstack([a, b]), lambda a, b: np.hstack([a, b]),
         [((2, 3), (2, 1)), ((3,), (2,)), ((), ())]),
    Case("vstack", lambda a, b: eagerc.vstack([a, b]), lambda a, b: np.vstack([a, b]),
         [((2, 3), (1, 3)), ((3,), (3,)), ((), ())]),
    Case("dstack", lambda a, b: eagerc.dstack([a, b]), lambda a, b: np.dstack([a, b]),
         [((2, 3), (2, 3)), ((3,), (3,)), ((2, 3, 1), (2, 3, 2))]),
    Case("atleast_2d", lambda x: eagerc.atleast_2d(x) * 1, lambda x: np.atleast_2d(x) * 1,
         [((),), ((3,),), ((2, 3),)]),
    Case("atleast_3d", lambda a, b: eagerc.atleast_3d(a, b), lambda a, b: (np.atleast_3d(a), np.atleast_3d(b)),
         [((3,), (2, 3))]),
    Case("split", lambda x: x.split(2, 1), lambda x: _split_ref(x, 2, 1), [((3, 5),), ((2, 4),), ((3, 0),), ((3, 1),)]),
    Case("split_fn", lambda x: eagerc.split(x, 3), lambda x: _split_ref(x, 3, 0), [((7, 2),), ((3,),)]),
    Case("split_sections", lambda x: x.split([1, 3, 0, 1]), lambda x: tuple(np.split(x, [1, 4, 4])),
         [((5, 2),), ((5,),)]),
    Case("split_with_sizes", lambda x: x.split_with_sizes((2, 2), -1), lambda x: (x[..., :2], x[..., 2:]),
         [((3, 4),)]),
    Case("chunk", lambda x: x.chunk(3, -1), lambda x: _chunk_ref(x, 3),
         [((2, 7),), ((2, 6),), ((2, 2),), ((2, 0),)]),
    Case("chunk_fn", lambda x: eagerc.chunk(x, 2, dim=-1), lambda x: _chunk_ref(x, 2), [((5,),), ((3, 4),)]),
    Case("tensor_split", lambda x: eagerc.tensor_split(x, 3), lambda x: tuple(np.array_split(x, 3)),
         [((7, 2),), ((2,),), ((0, 2),)]),
    Case("tensor_split_indices", lambda x: x.tensor_split([1, 4, 2, 9], dim=1),
         lambda x: tuple(np.split(x, [1, 4, 2, 9], axis=1)), [((2, 6),), ((1, 3),)]),
    Case("unbind", lambda x: x.unbind(1), lambda x: tuple(x[:, i] for i in range(x.shape[1])),
         [((3, 4),), ((2, 3, 2),), ((3, 0),)]),
    Case("unbind_1d", lambda x: eagerc.unbind(x), lambda x: tuple(x[i] for i in range(x.shape[0])),
         [((4,),), ((1,),)]),
    Case("unbind_neg", lambda x: x.unbind(-1), lambda x: tuple(x[..., i] for i in range(x.shape[-1])),
         [((2, 3),)]),
    Case("split_cat_roundtrip", lambda x: eagerc.cat(x.chunk(2, 1)[::-1], 1),
         lambda x: np.concatenate([x[:, 2:], x[:, :2]], 1), [((3, 4),)]),
    # second derivatives
    Case("cat_grad2", _cat_grad2, lambda a, b: (3 * a ** 2, 3 * b ** 2), [((2, 3), (2, 1))]),
    Case("stack_grad2", _stack_grad2, lambda a, b: (3 * a ** 2, 3 * b ** 2), [((2, 3), (2, 3))]),
    Case("unbind_grad2", _unbind_grad2, lambda x: 3 * x ** 2 * np.arange(1, x.shape[1] + 1), [((3, 4),)]),
]
