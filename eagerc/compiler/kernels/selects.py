"""Elementwise work moved inside selects: f(where(c, a, u)) -> where(c, f(a), f(u)) when u is
the same along the row (a constant, a per-row value).

Why: attention's causal softmax is exp(where(mask, scores, -inf) - rowmax). Fed -inf in
half its lanes, the vector exp of glibc's libmvec leaves its fast path for every vector
holding one (its special-input fallback calls the scalar exp once per lane): the masked
softmax row kernel ran 2.2x slower than the same kernel with no -inf. Moved inside the
select, exp only sees the scores (finite), and exp(-inf - rowmax) is computed once per row
(0, as before). Each lane computes f of the value it selected either way, so the values are
the same (f of the uniform branch is computed once per row instead of in the vector loop:
by the same libm function, in its scalar form).

The rewrite applies to every elementwise instruction whose operands, but for one select, are
uniform too (so f(u) is uniform), repeatedly: exp(sub(where(m, x, -inf), max)) ->
where(m, exp(sub(x, max)), exp(sub(-inf, max))). Instructions no longer read are dropped.
"""
from ...runtime.kernels.ir import LEAVES, RANDOM, ROW_REDUCE, Instr, Reduction

__all__ = ["push_into_selects"]


def _uniform(k):
    """Per instruction: the same value at every element of a row (row kernels) or of the whole
    index space (others): constants, params, row-broadcast loads, row reductions."""
    level = k.row_level() if k.row_dims else None
    out = []
    for i, ins in enumerate(k.instrs):
        if ins.op in ("const", "param"):
            out.append(True)
        elif ins.op in ("load", "index") or ins.op in RANDOM:
            out.append(bool(level and level[i]))
        elif ins.op in ROW_REDUCE:
            out.append(True)
        else:
            out.append(all(out[a] for a in ins.args))
    return out


def push_into_selects(k):
    """Rewrite kernel `k` in place (see the module docstring); a kernel without a select that
    has a uniform branch is left as it is."""
    uniform = _uniform(k)
    if not any(ins.op == "where" and not uniform[i] and (uniform[ins.args[1]] or uniform[ins.args[2]])
               for i, ins in enumerate(k.instrs)):
        return k
    new, index, uni = [], {}, []

    def add(op, args, dtype, u):
        ins = Instr(op, tuple(args), dtype)
        if ins not in index:
            index[ins] = len(new)
            new.append(ins)
            uni.append(u)
        return index[ins]

    def build(op, args, dtype):
        """The instruction op(args) over the new list, pushed into a select where it pays."""
        if op not in LEAVES and op not in ROW_REDUCE and op not in RANDOM and op != "where":
            sel = [p for p, a in enumerate(args) if not uni[a]]
            if len(sel) == 1:
                w = new[args[sel[0]]]
                if w.op == "where" and (uni[w.args[1]] or uni[w.args[2]]):
                    p = sel[0]
                    branches = [build(op, args[:p] + (b,) + args[p + 1:], dtype) for b in w.args[1:]]
                    return add("where", (w.args[0], *branches), dtype, False)
        if op in LEAVES:
            u = op in ("const", "param")
        elif op in ROW_REDUCE:
            u = True
        else:
            u = op not in RANDOM and all(uni[a] for a in args)
        return add(op, args, dtype, u)

    remap = []
    for i, ins in enumerate(k.instrs):
        if ins.op in LEAVES:
            remap.append(add(ins.op, ins.args, ins.dtype, uniform[i]))
        else:
            remap.append(build(ins.op, tuple(remap[a] for a in ins.args), ins.dtype))
    # keep what the stores, the row reductions feeding them and the final reduction read
    roots = [remap[i] for i, _ in k.stores] + ([remap[k.reduction.src]] if k.reduction is not None else [])
    live, stack = set(), list(roots)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            if new[i].op not in LEAVES:
                stack.extend(new[i].args)
    order = sorted(live)
    pos = {old: n for n, old in enumerate(order)}
    k.instrs = [new[i] if new[i].op in LEAVES else Instr(new[i].op, tuple(pos[a] for a in new[i].args), new[i].dtype)
                for i in order]
    k.stores = [(pos[remap[i]], slot) for i, slot in k.stores]
    if k.reduction is not None:
        r = k.reduction
        k.reduction = Reduction(r.kind, pos[remap[r.src]], r.axis, r.out, r.dtype, r.lead)
    return k
