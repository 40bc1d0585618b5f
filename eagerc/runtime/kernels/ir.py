"""The kernel IR: one fused group of graph nodes as a loop over an index space.

A `Kernel` is

- an index space: the output shape (static ints), walked in contiguous C order;
- `inputs`: arrays the kernel loads, each with per-dimension strides in elements over the
  index space (0 on broadcast dimensions; inputs are contiguous arrays);
- `instrs`: a straight-line list of `Instr` (SSA: an instruction refers to earlier ones by
  index) -- loads, constants and elementwise ops, each with its dtype;
- `stores`: instructions written to outputs;
- `reduction` (optional, kernels without row_dims): one sum/mean/max/min of an
  instruction over all elements (one result), or a sum/mean over the first `lead`
  dimensions (one result per element of the others: a bias gradient), written to its own
  output;
- `inplace` (set by the backend): output slots written into the array of an input slot
  (an optimizer update reading and writing the same element).

Dtypes: float16 and bfloat16 (computed in float, rounded to their 16 bits after every op,
as numpy's float16 and ml_dtypes' bfloat16 ufuncs do), float32, float64, bool,
int8/16/32/64, uint8.

Row kernels. With `row_dims = k > 0` the last k dimensions of the index space are a *row*
(softmax's class dimension, layer_norm's normalized dimensions) and instructions may
reduce over it: `row_sum`, `row_mean`, `row_max`, `row_min` give one value per row, and
later instructions may use that value at every element of the row. This is how
multi-pass patterns (softmax = max, exp-sum, divide; layer_norm = mean, variance,
normalise) become one kernel: the renderer walks each row once per reduction stage
(`row_passes()`), recomputing cheap elementwise instructions instead of writing
temporaries, so a row is read from cache rather than memory after the first pass
(expensive ones, such as softmax's exp, a renderer may keep in a per-row scratch array).
Every instruction is *row-level* (the same for the whole row: row-broadcast loads,
constants, reductions and what is computed from them alone) or *element-level*. A stored
element-level value fills a full-shape output; a stored row-level value fills an output
with one element per row.

Random numbers (RNG in kernels). `params` are scalar kernel arguments after the outputs
(uint64: a random node's seed and word offset, which change every call: `Param.node` and
`Param.attr` say which graph attribute the driver passes). Instructions `param` (args =
(param slot,)) read one; `index` (no args) is the flat C-order index of the current element
over the index space; `rand_uniform` / `rand_normal` (args = (seed, offset, index)
instructions) draw element `index` of a draw at that seed and offset, bit for bit the
numbers of eagerc.runtime.random (kernels/philox.py). `index`, and so every random value,
is element-level; `param` is row-level like a constant.

The IR knows nothing about C or CUDA: renderers (render.py) turn it into source through
one `code_for_op` table. `loop_shape()` gives the index space with adjacent dimensions
merged where every load allows it, which the renderers loop over.
"""
import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

__all__ = ["Buffer", "Instr", "Reduction", "Kernel", "Param", "contiguous_strides", "broadcast_strides"]

# dtypes a kernel can load, compute and store (numpy names)
DTYPES = ("float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32", "int64", "uint8")
FLOATS = ("float16", "bfloat16", "float32", "float64")
HALVES = ("float16", "bfloat16")   # held as float, rounded after every op


@dataclass(frozen=True)
class Buffer:
    """An array a kernel reads or writes: the graph value's name, dtype and shape."""
    name: str
    dtype: str
    shape: tuple
    strides: tuple = ()     # loads: element strides over the index space (0 = broadcast)


@dataclass(frozen=True)
class Instr:
    """op: "load" (args = (input slot,)), "const" (args = (value,)) or an op of the
    renderer table (args = instruction indices). dtype: the value's numpy dtype name."""
    op: str
    args: tuple
    dtype: str


ROW_REDUCE = ("row_sum", "row_mean", "row_max", "row_min")
RANDOM = ("rand_uniform", "rand_normal")        # args: (seed param, offset param, index)
LEAVES = ("load", "const", "param", "index")    # instructions whose args are not instructions
COMMUTATIVE = ("add", "mul")                     # binary ops whose operands may swap, bit for bit


class Param(NamedTuple):
    """A scalar kernel argument: attribute `attr` ("seed", "offset") of graph node `node`,
    passed per call by the driver."""
    node: str
    attr: str
    dtype: str = "uint64"


@dataclass(frozen=True)
class Reduction:
    """The final reduction of a kernel without row_dims: over all elements of the index space
    (axis "all"), or over its first `lead` dimensions (axis "lead", sum/mean only: one
    result per element of the remaining dimensions -- a bias gradient)."""
    kind: str          # "sum", "mean", "max", "min"
    src: int           # instruction index
    axis: str          # "all" or "lead"
    out: int           # output slot
    dtype: str         # result dtype
    lead: int = 0      # axis "lead": how many leading dimensions are reduced


@dataclass(frozen=True)
class Pass:
    """One walk over a row: `before` row-level instructions computed ahead of it, `elems`
    the element-level instructions it evaluates (in order), `reduces` the row reductions
    it accumulates, `stores` whether it writes the element-level outputs (the last pass);
    `saves`: instructions it keeps in a per-row scratch array, `reloads`: instructions it
    reads back from there instead of recomputing them (see Kernel.row_passes)."""
    before: tuple
    elems: tuple
    reduces: tuple
    stores: bool
    saves: tuple = ()
    reloads: tuple = ()


@dataclass
class Kernel:
    name: str
    shape: tuple                                   # the index space
    inputs: list = field(default_factory=list)     # [Buffer] with strides
    outputs: list = field(default_factory=list)    # [Buffer]
    instrs: list = field(default_factory=list)     # [Instr]
    stores: list = field(default_factory=list)     # [(instr index, output slot)]
    reduction: Optional[Reduction] = None
    nodes: list = field(default_factory=list)      # names of the graph nodes it computes
    row_dims: int = 0                              # trailing dimensions that form a row
    inplace: dict = field(default_factory=dict)    # output slot -> input slot it overwrites
    params: list = field(default_factory=list)     # [Param]: scalar arguments after the outputs
    # input slot -> element offset of the row after this kernel's one, for a kernel of one row that
    # a caller runs row by row (eager.py's `<name>_rows`); rows of a kernel's own come from strides
    next_rows: dict = field(default_factory=dict)

    # ------------------------------------------------------------ building
    def add(self, op, args, dtype):
        """Append an instruction (deduplicated: the same op on the same args is reused).
        A commutative op's operands are put in index order first, so `a * b` and `b * a`
        are one instruction (IEEE addition and multiplication are exactly commutative: the
        tanh-GELU forward and its derivative then share one tanh)."""
        args = tuple(args)
        if op in COMMUTATIVE and args[1] < args[0]:
            args = (args[1], args[0])
        ins = Instr(op, args, dtype)
        for i, old in enumerate(self.instrs):
            if old == ins:
                return i
        self.instrs.append(ins)
        return len(self.instrs) - 1

    def load(self, name, dtype, shape, strides=None):
        """The instruction loading graph value `name` (one input slot per value and strides);
        strides over the index space default to numpy broadcasting."""
        strides = broadcast_strides(shape, self.shape) if strides is None else tuple(strides)
        for slot, b in enumerate(self.inputs):
            if b.name == name and b.strides == strides:
                return self.add("load", (slot,), dtype)
        self.inputs.append(Buffer(name, dtype, tuple(shape), strides))
        return self.add("load", (len(self.inputs) - 1,), dtype)

    def param(self, node, attr, dtype="uint64"):
        """The instruction reading scalar argument `attr` of graph node `node` (one slot each)."""
        p = Param(node, attr, dtype)
        if p not in self.params:
            self.params.append(p)
        return self.add("param", (self.params.index(p),), dtype)

    def index(self):
        """The instruction giving the current element's flat (C-order) index, int64."""
        return self.add("index", (), "int64")

    def uses_rng(self):
        return any(ins.op in RANDOM for ins in self.instrs)

    def uses_dtype(self, dtype):
        """Does the kernel read, write or compute values of `dtype`?"""
        return any(b.dtype == dtype for b in self.inputs + self.outputs) or any(i.dtype == dtype for i in self.instrs)

    def store(self, instr, name, dtype, shape):
        self.outputs.append(Buffer(name, dtype, tuple(shape)))
        self.stores.append((instr, len(self.outputs) - 1))

    # ------------------------------------------------------------ queries
    def numel(self):
        return math.prod(self.shape)

    def cut(self):
        """Where the index space splits into outer dimensions and inner ones that loops keep
        apart: before the row of a row kernel, after the dims a "lead" reduction reduces."""
        if self.row_dims:
            return len(self.shape) - self.row_dims
        if self.reduction is not None and self.reduction.axis == "lead":
            return self.reduction.lead
        return None

    def rows_cols(self):
        """(rows, cols): the number of rows and the elements per row (row kernels; for a
        "lead" reduction: reduced elements and results)."""
        cut = self.cut()
        cut = len(self.shape) if cut is None else cut
        return math.prod(self.shape[:cut]), math.prod(self.shape[cut:])

    def loop_shape(self):
        """(sizes, [strides per input], split) of the index space with adjacent dimensions
        merged when every input's strides allow it; size-1 dimensions are dropped. The first
        `split` dimensions are the row dimensions of a row kernel (merged only among
        themselves, as are the row's own dimensions); split = len(sizes) otherwise, and a
        row kernel always keeps at least one row dimension (size 1 when there is one row)."""
        n = len(self.shape)
        cut = self.cut()
        parts = []
        for lo, hi in ((0, cut), (cut, n)) if cut is not None else ((0, n),):
            keep = [d for d in range(lo, hi) if self.shape[d] != 1]
            sizes = [self.shape[d] for d in keep] or [1]
            strides = [[b.strides[d] for d in keep] or [0] for b in self.inputs]
            d = len(sizes) - 2
            while d >= 0:
                if all(st[d] == st[d + 1] * sizes[d + 1] for st in strides):
                    sizes[d:d + 2] = [sizes[d] * sizes[d + 1]]
                    for st in strides:
                        st[d:d + 2] = [st[d + 1]]
                d -= 1
            parts.append((sizes, strides))
        sizes = [s for p in parts for s in p[0]]
        strides = [tuple(x for p in parts for x in p[1][i]) for i in range(len(self.inputs))]
        return tuple(sizes), strides, len(parts[0][0])

    def row_level(self):
        """Per instruction: True when its value is the same across a row (row kernels)."""
        cut = len(self.shape) - self.row_dims
        level = []
        for ins in self.instrs:
            if ins.op == "load":
                b = self.inputs[ins.args[0]]
                level.append(self.row_dims > 0 and not any(b.strides[cut:]))
            elif ins.op in ("const", "param") or ins.op in ROW_REDUCE:
                level.append(self.row_dims > 0)
            elif ins.op == "index":
                level.append(False)
            else:
                level.append(all(level[a] for a in ins.args))
        return level

    def row_passes(self, cacheable=None):
        """The walks over a row a row kernel makes, as [Pass]; then the row-level
        instructions left for after the last pass. An element-level instruction at stage s
        needs the reductions of s earlier passes; reductions of stage-s values accumulate in
        pass s; element-level outputs are written in the last pass. An instruction needed
        again by a later pass is recomputed there (its inputs are in cache by then), unless
        `cacheable(i)` says it is worth a scratch row (softmax's exp: computed once, saved in
        the pass that sums it, read back by the pass that divides)."""
        level = self.row_level()
        stage = []
        for ins in self.instrs:
            if ins.op in LEAVES:
                stage.append(0)
            elif ins.op in ROW_REDUCE:
                stage.append(stage[ins.args[0]] + 1)
            else:
                stage.append(max(stage[a] for a in ins.args))
        elem_stores = [i for i, _ in self.stores if not level[i]]
        last = max([stage[i] for i in elem_stores] +
                   [stage[i] - 1 for i, ins in enumerate(self.instrs) if ins.op in ROW_REDUCE] + [-1])
        done = set()
        passes = []
        first = {}      # element-level instruction -> the pass that computes it first
        for p in range(last + 1):
            before = [i for i in range(len(self.instrs))
                      if level[i] and i not in done and stage[i] <= p and self.instrs[i].op not in ROW_REDUCE]
            done.update(before)
            reduces = [i for i, ins in enumerate(self.instrs) if ins.op in ROW_REDUCE and stage[i] == p + 1]
            roots = [self.instrs[i].args[0] for i in reduces] + (elem_stores if p == last else [])
            need, reload = set(), set()
            stack = [r for r in roots if not level[r]]
            while stack:
                i = stack.pop()
                if i in need or i in reload:
                    continue
                if i in first and cacheable is not None and cacheable(i):
                    reload.add(i)
                    continue
                need.add(i)
                stack.extend(a for a in self.instrs[i].args if self.instrs[i].op not in LEAVES
                             and not level[a])
            for i in need:
                first.setdefault(i, p)
            passes.append([tuple(before), tuple(sorted(need)), tuple(reduces), p == last, (), tuple(sorted(reload))])
            done.update(reduces)
        for p in passes:
            for i in p[5]:
                if i not in passes[first[i]][4]:
                    passes[first[i]][4] += (i,)
        passes = [Pass(*p) for p in passes]
        tail = tuple(i for i in range(len(self.instrs)) if level[i] and i not in done)
        return passes, tail

    def __str__(self):
        lines = [f"kernel {self.name} over {list(self.shape)}  # {' '.join(self.nodes)}"]
        for i, b in enumerate(self.inputs):
            lines.append(f"  in{i} = {b.name}: {b.dtype}{list(b.shape)} strides {list(b.strides)}")
        for i, p in enumerate(self.params):
            lines.append(f"  p{i} = {p.node}.{p.attr}: {p.dtype}")
        for i, ins in enumerate(self.instrs):
            lines.append(f"  v{i}: {ins.dtype} = {ins.op}{ins.args}")
        for i, slot in self.stores:
            lines.append(f"  out{slot} <- v{i}  ({self.outputs[slot].name})")
        if self.row_dims:
            lines.insert(1, f"  rows over the last {self.row_dims} dimension(s)")
        if self.reduction:
            r = self.reduction
            lines.append(f"  out{r.out} <- {r.kind}(v{r.src}) over {r.axis}  ({self.outputs[r.out].name})")
        return "\n".join(lines)


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def broadcast_strides(shape, space):
    """Element strides of a contiguous array of `shape` read over index space `space`
    (numpy broadcasting: missing leading and size-1 dimensions get stride 0)."""
    shape = tuple(shape)
    if len(shape) > len(space):
        raise ValueError(f"cannot broadcast {shape} to {space}")
    own = contiguous_strides(shape)
    pad = len(space) - len(shape)
    out = [0] * pad
    for d, (s, st) in enumerate(zip(shape, own)):
        if s == space[pad + d]:
            out.append(st if s != 1 else 0)
        elif s == 1:
            out.append(0)
        else:
            raise ValueError(f"cannot broadcast {shape} to {space}")
    return tuple(out)
