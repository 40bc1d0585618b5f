"""Joining and splitting: cat/concat/concatenate, stack, hstack/vstack/dstack,
atleast_1d/2d/3d, split, chunk, tensor_split, unbind.

cat and stack are variadic primitives: their inputs are promoted to one dtype here
(torch.cat's rule) and their derivatives (`defgrad_node`) cut the output gradient
back into `slice` views using the input shapes the node kept. Splitting has no
primitive of its own: every piece is its own `slice` view (unbind adds a reshape to
drop the dimension), so there are no multi-output ops. For autograd the pieces' nodes
pass their gradients to one `Gather` node that joins them with one cat (stack for
unbind), so backward stays linear in the number of pieces.
"""
import itertools

from ..dispatch import CustomOp, apply, custom_node  # first: importing autograd before dispatch re-enters eagerc/__init__
from ..autograd.engine import Gather
from ..autograd.formulas import defgrad_node
from ..runtime import dtypes
from ..runtime.ops import OPS
from ..runtime.ops.meta import fmt_shape
from .._tensor import Tensor
from .elementwise import cast
from .shape import _wrap

__all__ = ["cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "atleast_1d",
           "atleast_2d", "atleast_3d", "split", "chunk", "tensor_split", "unbind"]

_CAT = OPS["cat"]
_STACK = OPS["stack"]
_SLICE = OPS["slice"]
_RESHAPE = OPS["reshape"]


def _tensors(op, tensors):
    """The inputs as a tuple of Tensors of one (promoted) dtype."""
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}: expected a sequence of Tensors, got a single Tensor of shape "
                        f"{fmt_shape(tensors._array.shape)} (wrap it in a list)")
    ts = tuple(tensors)
    if not ts:
        raise RuntimeError(f"{op}: expected a non-empty list of Tensors")
    dt = None
    mixed = False
    for i, t in enumerate(ts):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected Tensor as element {i} of the list, but got {type(t).__name__}")
        if dt is None:
            dt = t._array.dtype
        elif t._array.dtype != dt:
            mixed = True
    if mixed:
        d = dtypes.result_type([dtypes.from_np(t._array.dtype) for t in ts], [], [])
        ts = tuple(cast(t, d) for t in ts)
    return ts


def cat(tensors, dim=0):
    """Concatenate along an existing dimension; dtypes are promoted like torch.cat.

    As in PyTorch, 1-d empty tensors (shape (0,)) are skipped when the others have
    another number of dimensions."""
    ts = _tensors("cat", tensors)
    nd = ts[0]._array.ndim
    if nd == 1 and len(ts) > 1 and ts[0]._array.shape == (0,):
        for t in ts:
            if t._array.shape != (0,):
                nd = t._array.ndim
                break
    if nd != 1:
        kept = tuple([t for t in ts if t._array.shape != (0,)])
        if kept and len(kept) != len(ts):
            ts = kept
    nd = ts[0]._array.ndim
    d = _wrap("cat", dim, nd) if nd else int(dim)
    return apply(_CAT, ts, {"dim": d})


concat = concatenate = cat


def stack(tensors, dim=0):
    """Join same-shape tensors along a new dimension `dim`."""
    ts = _tensors("stack", tensors)
    return apply(_STACK, ts, {"dim": _wrap("stack", dim, ts[0]._array.ndim + 1)})


def _atleast(x, nd, place):
    shape = x._array.shape
    if len(shape) >= nd:
        return x
    return apply(_RESHAPE, (x,), {"shape": place(shape)})


def _shape_1d(shape):  # only 0-d tensors get here
    return (1,)


def _shape_2d(shape):  # () -> (1, 1); (n,) -> (1, n)
    return (1,) * (2 - len(shape)) + shape


def _shape_3d(shape):  # () -> (1, 1, 1); (n,) -> (1, n, 1); (m, n) -> (m, n, 1), like numpy
    if not shape:
        return (1, 1, 1)
    return (1,) + shape + (1,) if len(shape) == 1 else shape + (1,)


def _atleast_all(tensors, nd, place):
    if len(tensors) == 1 and not isinstance(tensors[0], Tensor):
        return tuple(_atleast(t, nd, place) for t in tensors[0])
    out = tuple(_atleast(t, nd, place) for t in tensors)
    return out[0] if len(out) == 1 else out


def atleast_1d(*tensors):
    return _atleast_all(tensors, 1, _shape_1d)


def atleast_2d(*tensors):
    return _atleast_all(tensors, 2, _shape_2d)


def atleast_3d(*tensors):
    return _atleast_all(tensors, 3, _shape_3d)


def hstack(tensors):
    ts = tuple(_atleast(t, 1, _shape_1d) for t in _tensors("hstack", tensors))
    return cat(ts, 0 if ts[0]._array.ndim == 1 else 1)


def vstack(tensors):
    return cat(tuple(_atleast(t, 2, _shape_2d) for t in _tensors("vstack", tensors)), 0)


row_stack = vstack


def dstack(tensors):
    return cat(tuple(_atleast(t, 3, _shape_3d) for t in _tensors("dstack", tensors)), 2)


def _pieces(x, d, bounds, name):
    """`slice` views of x along d; when they partition x (every split and chunk does; tensor_split
    with decreasing indices need not), their gradients are joined by one Gather node (`_gather`)."""
    pieces = _slices(x, d, bounds)
    partition = bounds[0][0] == 0 and bounds[-1][1] == x._array.shape[d] and all(
        a <= b for a, b in bounds) and all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))
    if not partition:
        return pieces
    return _gather(name, x, pieces, pieces[0].grad_fn, d, [b - a for a, b in bounds])


def _slices(x, d, bounds):
    return tuple(apply(_SLICE, (x,), {"dim": d, "start": a, "stop": b, "step": 1}) for a, b in bounds)


def _split_dim(op, x, dim):
    shape = x._array.shape
    if not shape:
        raise RuntimeError(f"{op}: expects at least a 1-dimensional tensor, got a 0-d tensor")
    d = _wrap(op, dim, len(shape))
    return d, shape[d]


def split(tensor, split_size_or_sections, dim=0):
    """Pieces of `split_size` along `dim` (the last may be smaller), or of the given sizes."""
    d, n = _split_dim("split", tensor, dim)
    s = split_size_or_sections
    if isinstance(s, (int, Tensor)):
        size = int(s)
        if size < 0:
            raise RuntimeError(f"split: split_size must be non-negative, got {size}")
        if size == 0 and n != 0:
            raise RuntimeError(f"split: split_size can only be 0 if dimension size is 0, but got size {n} "
                               f"for dimension {d} (shape {fmt_shape(tensor._array.shape)})")
        if n == 0:
            return _pieces(tensor, d, [(0, 0)], "split")
        return _pieces(tensor, d, [(a, min(a + size, n)) for a in range(0, n, size)], "split")
    sizes = [int(k) for k in s]
    if any(k < 0 for k in sizes) or sum(sizes) != n:
        raise RuntimeError(f"split: split sizes {sizes} must be non-negative and sum exactly to {n}, the size "
                           f"of dimension {d} (shape {fmt_shape(tensor._array.shape)})")
    ends = list(itertools.accumulate(sizes))
    return _pieces(tensor, d, list(zip([0] + ends, ends)), "split")


def split_with_sizes(tensor, split_sizes, dim=0):
    return split(tensor, list(split_sizes), dim)


def chunk(input, chunks, dim=0):
    """At most `chunks` pieces of ceil(size / chunks) along `dim` (PyTorch's rule)."""
    chunks = int(chunks)
    if chunks <= 0:
        raise RuntimeError(f"chunk: expects `chunks` to be greater than 0, got {chunks}")
    d, n = _split_dim("chunk", input, dim)
    size = (n + chunks - 1) // chunks
    if n == 0:
        return _pieces(input, d, [(0, 0)] * chunks, "split")
    return split(input, size, d)


def tensor_split(input, indices_or_sections, dim=0):
    """`sections` near-equal pieces (the first n % sections one longer), or cut at `indices`."""
    d, n = _split_dim("tensor_split", input, dim)
    s = indices_or_sections
    if isinstance(s, (int, Tensor)) and not (isinstance(s, Tensor) and s._array.ndim):
        sections = int(s)
        if sections <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be greater than 0, got {sections}")
        q, r = divmod(n, sections)
        ends = [(i + 1) * q + min(i + 1, r) for i in range(sections)]   # the first r pieces one longer
        return _pieces(input, d, list(zip([0] + ends, ends)), "split")
    idx = [int(i) for i in (s.tolist() if isinstance(s, Tensor) else s)]
    bounds, a = [], 0
    for i in idx + [n]:  # like PyTorch (and numpy): piece k is input[idx[k-1]:idx[k]], maybe empty
        i = min(max(i + n if i < 0 else i, 0), n)
        bounds.append((a, max(i, a)))
        a = i
    return _pieces(input, d, bounds, "split")


def unbind(input, dim=0):
    """The slices along `dim`, with that dimension removed (each a view)."""
    shape = input._array.shape
    if not shape:
        raise IndexError("unbind: dimension specified as 0 but the tensor has no dimensions")
    d = _wrap("unbind", dim, len(shape))
    rest = {"shape": shape[:d] + shape[d + 1:]}
    slices = _slices(input, d, [(i, i + 1) for i in range(shape[d])])
    if not slices:
        return ()
    pieces = tuple(apply(_RESHAPE, (p,), rest) for p in slices)
    return _gather("unbind", input, pieces, slices[0].grad_fn, d, [1] * shape[d], stacked=True)


# ---------------------------------------------------------------- derivatives

def _cat_grad(node, g):
    dim = node.attrs["dim"]
    grads = []
    off = 0
    for edge, shape in zip(node.next, node.shapes):
        n = shape[dim]
        grads.append(None if edge is None else
                     apply(_SLICE, (g,), {"dim": dim, "start": off, "stop": off + n, "step": 1}))
        off += n
    return grads


def _stack_grad(node, g):
    dim = node.attrs["dim"]
    return [None if edge is None else
            apply(_RESHAPE, (apply(_SLICE, (g,), {"dim": dim, "start": i, "stop": i + 1, "step": 1}),),
                  {"shape": tuple(shape)})
            for i, (edge, shape) in enumerate(zip(node.next, node.shapes))]


defgrad_node("cat", _cat_grad)
defgrad_node("stack", _stack_grad)

for _n in ("split", "split_with_sizes", "chunk", "tensor_split", "unbind"):
    setattr(Tensor, _n, globals()[_n])


# ---------------------------------------------------------------- the pieces' backward

def _pass_on(node, g):
    return [g]


def _join(node, parts):
    """The whole's gradient from its pieces' (zeros for pieces that got none): one cat, or one
    stack for unbind's pieces, which lost the dimension."""
    from .creation import zeros
    a = node.attrs
    grads = [None] * len(a["sizes"])
    for piece, g in parts.items():
        grads[piece.attrs["piece"]] = g
    shape, like = list(a["shape"]), next(iter(parts.values()))
    for i, g in enumerate(grads):
        if g is None:   # a broadcast zero: nothing to fill, the join copies it anyway
            shape[a["dim"]] = a["sizes"][i]
            g = zeros((), dtype=like.dtype, device=like.device).expand(tuple(shape))
            grads[i] = g.squeeze(a["dim"]) if a["stacked"] else g
    return [stack(grads, a["dim"]) if a["stacked"] else cat(grads, a["dim"])]


# the backward-only steps of a split: the pieces' nodes (each passes its gradient on, as is)
# and the Gather that joins them
_STEPS = {name: (CustomOp(name, _pass_on), CustomOp(name, _join)) for name in ("split", "unbind")}


def _gather(name, x, pieces, sliced, d, sizes, stacked=False):
    """Route the pieces' gradients through one Gather node into x's (see autograd/engine.py):
    `sliced` is the first slice's node, whose edge leads to x."""
    if sliced is None:
        return pieces
    first = pieces[0].grad_fn
    piece_step, join_step = _STEPS[name]
    gather = custom_node(join_step, {"dim": d, "shape": tuple(x._array.shape), "sizes": sizes, "stacked": stacked},
                         [sliced.next[0]], x._array.dtype, created_at=first.created_at, cls=Gather)
    for i, p in enumerate(pieces):
        node = p.grad_fn
        node.op, node.next, node.attrs = piece_step, [gather], {"piece": i}
        node.saved = node.versions = node.shapes = None
    return pieces
