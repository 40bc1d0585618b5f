"""The kernel IR: one fused group of graph nodes as a loop over an index space.

A `Kernel` is

- an index space: the output shape (static ints), walked in contiguous C order;
- `inputs`: arrays the kernel loads, each with per-dimension strides in elements over the
  index space (0 on broadcast dimensions; inputs are contiguous arrays);
- `instrs`: a straight-line list of `Instr` (SSA: an instruction refers to earlier ones by
  index) -- loads, constants and elementwise ops, each with its dtype;
- `stores`: instructions written to full-shape outputs (one element per index);
- `reduction` (optional): one sum/mean/max/min of an instruction, over the last dimension
  (one result per row) or over all elements (one result), written to its own output.

The IR knows nothing about C or CUDA: renderers (render.py) turn it into source through
one `code_for_op` table. `loop_shape()` gives the index space with adjacent dimensions
merged where every load allows it, which the renderers loop over.
"""
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["Buffer", "Instr", "Reduction", "Kernel", "contiguous_strides", "broadcast_strides"]

# dtypes a kernel can load, compute and store (numpy names)
DTYPES = ("float32", "float64", "bool", "int8", "int16", "int32", "int64", "uint8")
FLOATS = ("float32", "float64")


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


@dataclass(frozen=True)
class Reduction:
    kind: str          # "sum", "mean", "max", "min"
    src: int           # instruction index
    axis: str          # "last" or "all"
    out: int           # output slot
    dtype: str         # result dtype


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

    # ------------------------------------------------------------ building
    def add(self, op, args, dtype):
        """Append an instruction (deduplicated: the same op on the same args is reused)."""
        ins = Instr(op, tuple(args), dtype)
        for i, old in enumerate(self.instrs):
            if old == ins:
                return i
        self.instrs.append(ins)
        return len(self.instrs) - 1

    def load(self, name, dtype, shape):
        """The instruction loading graph value `name` (one input slot per value)."""
        for slot, b in enumerate(self.inputs):
            if b.name == name:
                return self.add("load", (slot,), dtype)
        self.inputs.append(Buffer(name, dtype, tuple(shape), broadcast_strides(shape, self.shape)))
        return self.add("load", (len(self.inputs) - 1,), dtype)

    def store(self, instr, name, dtype, shape):
        self.outputs.append(Buffer(name, dtype, tuple(shape)))
        self.stores.append((instr, len(self.outputs) - 1))

    # ------------------------------------------------------------ queries
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def loop_shape(self):
        """(sizes, [strides per input]) of the index space with adjacent dimensions merged
        when every input's strides allow it (and, for a per-row reduction, the last
        dimension kept apart). At least one dimension."""
        last_apart = self.reduction is not None and self.reduction.axis == "last"
        n = len(self.shape)
        keep = [d for d in range(n) if self.shape[d] != 1 or (last_apart and d == n - 1)]
        sizes = [self.shape[d] for d in keep] or [1]
        strides = [[b.strides[d] for d in keep] or [0] for b in self.inputs]
        d = len(sizes) - 2
        while d >= 0:
            if last_apart and d + 1 == len(sizes) - 1:
                d -= 1
                continue
            if all(s[d] == s[d + 1] * sizes[d + 1] for s in strides):
                sizes[d:d + 2] = [sizes[d] * sizes[d + 1]]
                for s in strides:
                    s[d:d + 2] = [s[d + 1]]
            d -= 1
        return tuple(sizes), [tuple(s) for s in strides]

    def __str__(self):
        lines = [f"kernel {self.name} over {list(self.shape)}  # {' '.join(self.nodes)}"]
        for i, b in enumerate(self.inputs):
            lines.append(f"  in{i} = {b.name}: {b.dtype}{list(b.shape)} strides {list(b.strides)}")
        for i, ins in enumerate(self.instrs):
            lines.append(f"  v{i}: {ins.dtype} = {ins.op}{ins.args}")
        for i, slot in self.stores:
            lines.append(f"  out{slot} <- v{i}  ({self.outputs[slot].name})")
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
