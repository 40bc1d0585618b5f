"""Exported programs: the file format, the validating loader, and the callable it returns.

An exported program is one safetensors file (see eagerc/runtime/safetensors_io.py):
the tensors are the program's weights (named by module path, e.g. `layers.0.weight`)
and, optionally, example inputs `__example__.N` and outputs `__example_output__.N`;
the string metadata holds

    checksum        "sha256:<hex>": a SHA-256 of every byte of the file, the first entry of the
                    metadata (see safetensors_io); checked before anything in the file is used
    format          "eagerc.program"
    format_version  "2" (version 1: the same, without the checksum; still loaded)
    eagerc_version  the eagerc that wrote the file
    graph           the graph IR as JSON (Graph.dumps()), specialised to the example sizes
    inputs          JSON list, one spec per argument: {"name", "path", "shape", "dtype"};
                    a dynamic dimension appears in "shape" by its name, e.g. "batch"
    dynamic         JSON {"dims": {name: {"example", "min", "max"}},
                          "patches": [[json path into the graph, c0, k, [dim names]], ...]}:
                    every integer of the graph that depends on dynamic sizes, as
                    c0 + k * product(dims)

`load(path)` trusts nothing in the file. Before anything runs it checks that the path
is a regular file, the byte layout, the checksum, the metadata, the graph's JSON schema
(sizes and nesting bounded), every op and attribute with the op's own shape/dtype rule
(eagerc.runtime.verify), the temporary buffers of kernels that need large ones (the ops'
scratch rules) against max_value_bytes, the weights against the graph's external inputs,
the input specs against the graph's arguments, and the dynamic-size table against the
graph. Nothing from the file is executed: ops are looked up by name in the registry,
attributes are plain JSON, no pickle. Every problem raises `ProgramLoadError` (a
ValueError) naming the file and what is wrong.

This module imports only the runtime layer (and numpy), so a deployed model needs
neither the frontend nor the compiler.
"""
import io
import json
import math
import os

import numpy as np

from . import dtypes, safetensors_io as st
from .ir import Graph, Node, Value, spec_of, FORMAT_VERSION as GRAPH_FORMAT_VERSION
from .ops import OPS
from .pytree import unflatten
from .verify import GraphError, Rules, arity as _arity, check_ends
from .bind import bind
from .executor import Plan, ProgramRunError, node_str as _node_str
from .sizes import SizeExpr

__all__ = ["load", "loads", "from_parts", "encode", "LoadedProgram", "ProgramLoadError", "NotAProgram",
           "ProgramInputError", "ProgramRunError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "eagerc.program"
FORMAT_VERSION = 2
CHECKSUM_KEY = "checksum"
EXAMPLE_IN = "__example__."
EXAMPLE_OUT = "__example_output__."

MAX_VALUE_BYTES = 2 ** 32   # default cap on any one value of the graph (4 GiB)
MAX_NAME = 1024             # characters in a value / tensor / dim name
MAX_STR = 4096              # characters in any other string of the graph
MAX_SHAPE = 2 ** 40         # largest size of one dimension
MAX_NDIM = 64
MAX_ATTR_DEPTH = 32         # nesting of an attribute value (the verifier's own limit)
MAX_ATTR_ITEMS = 10_000     # JSON items in one node's attributes
MAX_TREE_DEPTH = 64         # nesting of the output structure
MAX_INT = 2 ** 63           # integers anywhere in the graph are below this in magnitude
MAX_SPECIALISATIONS = 16    # cached graphs for different dynamic sizes

DTYPE_NAMES = dtypes.NAMES
_NP = {name: np.dtype(name) for name in DTYPE_NAMES if name != "bfloat16"}   # + bfloat16 on first use
NOT_IN_PROGRAMS = {"to_device"}  # a program runs on the device of its inputs

_META_KEYS = {"format", "format_version", "eagerc_version", "graph", "inputs", "dynamic"}


class ProgramLoadError(ValueError):
    """A file that is not a valid eagerc program; the message names the file and the problem."""


class NotAProgram(ProgramLoadError):
    """The file is something else: not safetensors at all (a .npy, a pickle), or a safetensors
    file without eagerc's program metadata (a checkpoint, plain weights)."""


class ProgramInputError(ValueError):
    """Arguments that do not match the program's input specs."""


class _Invalid(Exception):
    """Internal: a validation failure, turned into ProgramLoadError with the file's name."""


class _Other(_Invalid):
    """Internal: the file is not an eagerc program at all (-> NotAProgram)."""


def _fail(msg):
    raise _Invalid(msg)


# ================================================================ writing

def encode(graph_json, input_specs, dynamic, weights, producer, examples=None):
    """The (tensors, metadata) of a program file.

    graph_json: Graph.dumps() text; input_specs: list of spec dicts; dynamic: the dynamic
    table; weights: name -> numpy array; examples: (input arrays, output arrays) or None.
    """
    tensors = dict(weights)
    if examples is not None:
        ins, outs = examples
        tensors.update({f"{EXAMPLE_IN}{i}": a for i, a in enumerate(ins)})
        tensors.update({f"{EXAMPLE_OUT}{i}": a for i, a in enumerate(outs)})
    metadata = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "eagerc_version": producer,
                "graph": graph_json, "inputs": json.dumps(input_specs, sort_keys=True),
                "dynamic": json.dumps(dynamic, sort_keys=True)}
    return tensors, metadata


def save(path, tensors, metadata):
    """Write a program file atomically (temporary file + fsync + rename), sealed with its checksum."""
    st.save_file(path, tensors, metadata, checksum_key=CHECKSUM_KEY)


# ================================================================ loading

def load(path, *, max_value_bytes=MAX_VALUE_BYTES, max_header=st.MAX_HEADER, self_check=False):
    """Load an exported program from `path`, validating everything; returns a LoadedProgram.

    max_value_bytes caps the size of every value the program computes (a file cannot make
    the loader allocate more); self_check=True also runs the stored example inputs and
    compares with the stored example outputs.
    """
    where = os.fspath(path)
    try:
        f, size = st.open_regular(where)
    except st.FormatError as e:  # a FIFO, a device, a directory: refused before open() could block
        raise ProgramLoadError(f"{where}: {e}") from None
    except OSError as e:
        raise ProgramLoadError(f"{where}: cannot open: {e.strerror or e}") from None
    with f:
        return _load_file(f, size, where, max_value_bytes, max_header, self_check)


def loads(data, *, where="<bytes>", max_value_bytes=MAX_VALUE_BYTES, max_header=st.MAX_HEADER,
          self_check=False):
    """Load a program from the bytes of a file (same checks as `load`)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"eagerc.runtime.loads expects bytes, got {type(data).__name__}")
    data = bytes(data)
    return _load_file(io.BytesIO(data), len(data), where, max_value_bytes, max_header, self_check)


def _load_file(f, size, where, max_value_bytes, max_header, self_check):
    try:
        with st.gc_paused():
            header = st.read_header(f, size, max_header, checksum_key=CHECKSUM_KEY)
            arrays = st.read_tensors(f, header) if header.checksum else None  # verified before any use
            spec = _validate(header.metadata, {k: (dt, shape) for k, (dt, shape, _, _) in header.tensors.items()},
                             max_value_bytes, checksum=header.checksum, in_file=True)
            if arrays is None:
                arrays = st.read_tensors(f, header)
            prog = LoadedProgram(spec, arrays, where, max_value_bytes)
            del spec   # (the graph JSON of a static program goes while the collector rests)
    except st.NotSafetensors as e:
        raise NotAProgram(f"{where}: not an eagerc program: it {e}") from None
    except _Other as e:
        raise NotAProgram(f"{where}: {e}") from None
    except (st.FormatError, _Invalid) as e:
        raise ProgramLoadError(f"{where}: {e}") from None
    except OSError as e:
        raise ProgramLoadError(f"{where}: cannot read: {e.strerror or e}") from None
    if self_check:
        prog.self_check()
    return prog


def from_parts(tensors, metadata, *, where="<program>", max_value_bytes=MAX_VALUE_BYTES, self_check=False):
    """A LoadedProgram from in-memory parts (what `encode` returns), with the loader's checks."""
    try:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            _fail("metadata must map strings to strings")
        table = {}
        for name, a in tensors.items():
            if not isinstance(a, np.ndarray) or a.dtype not in st.DTYPES.values():
                _fail(f"tensor {name!r} is not a numpy array of a supported dtype")
            table[name] = (a.dtype, a.shape)
        spec = _validate(metadata, table, max_value_bytes, checksum=None, in_file=False)
    except _Other as e:
        raise NotAProgram(f"{where}: {e}") from None
    except _Invalid as e:
        raise ProgramLoadError(f"{where}: {e}") from None
    arrays = {k: np.array(a, copy=True, order="C") for k, a in tensors.items()}
    prog = LoadedProgram(spec, arrays, where, max_value_bytes)
    if self_check:
        prog.self_check()
    return prog


# ---------------------------------------------------------------- metadata

def _validate(metadata, table, max_value_bytes, checksum, in_file):
    """Check the metadata and the tensor table (name -> (numpy dtype, shape)); return the parsed
    program description. `checksum`: the file's verified checksum or None; a file (`in_file`) of
    format 2 must have one. Raises _Invalid."""
    fmt = metadata.get("format")
    if fmt != FORMAT:
        hint = " (it is an eagerc checkpoint: load it with eagerc.load)" \
            if metadata.get("eagerc.format") == "eagerc.checkpoint" else ""
        raise _Other(f"not an eagerc program: metadata 'format' is {_short(fmt)} (expected {FORMAT!r}){hint}")
    version = metadata.get("format_version")
    if version is None:
        _fail("metadata lacks 'format_version'")
    if not (version.isascii() and version.isdigit() and len(version) <= 6):
        _fail(f"metadata 'format_version' {_short(version)} is not a version number")
    producer = metadata.get("eagerc_version")
    if int(version) > FORMAT_VERSION:
        by = f" (the file was written by eagerc {producer[:64]})" if producer is not None else ""
        _fail(f"this file needs format version {int(version)}; this eagerc reads version "
              f"{FORMAT_VERSION} -- upgrade eagerc{by}")
    if int(version) < 1:
        _fail(f"format version {int(version)} does not exist (versions start at 1)")
    if in_file and int(version) >= 2 and checksum is None:
        _fail(f"format version {int(version)} carries a checksum as the first metadata entry, and this file "
              "has none there (damaged, or rewritten by another tool: re-export it, or see "
              "safetensors_io.seal)")
    missing = _META_KEYS - set(metadata)
    if missing:
        _fail(f"metadata lacks {sorted(missing)}")
    extra = set(metadata) - _META_KEYS - ({CHECKSUM_KEY} if checksum is not None else set())
    if extra:
        _fail(f"metadata has unknown keys {sorted(extra)[:5]}")
    if len(producer) > 64:
        _fail("metadata 'eagerc_version' is longer than 64 characters")

    text = metadata["graph"]
    try:
        gj, bound = st.loads_json_counted(text, "metadata 'graph'", constants=True)
    except st.FormatError as e:
        _fail(str(e))
    try:
        graph, keys, colons = _read_graph(gj, max_value_bytes)
    except _Invalid:
        _parse_json(text, "graph")   # a repeated key explains the failure first
        raise
    try:
        st.unique_keys(text, "metadata 'graph'", bound, keys, colons, constants=True)
    except st.FormatError as e:
        _fail(str(e))
    for target, _ in graph.mutations:
        if target.endswith(".grad"):
            _fail(f"graph: mutation target {target!r}: programs do not update gradients")

    externals = {v.name: v for v in graph.externals()}
    for name, v in externals.items():
        if name.startswith("__example"):
            _fail(f"graph: external input {name!r} uses a reserved name")
        if name not in table:
            _fail(f"weight {name!r} ({v.dtype}{list(v.shape)}) is missing from the file")
        dt, shape = table[name]
        if dt != _NP[v.dtype] or tuple(shape) != tuple(v.shape):
            _fail(f"weight {name!r} is {dt.name}{list(shape)} in the file but the graph reads "
                  f"{v.dtype}{list(v.shape)}")

    args = graph.args()
    dims, patches = _check_dynamic(_parse_json(metadata["dynamic"], "dynamic"), gj)
    specs = _check_specs(_parse_json(metadata["inputs"], "inputs"), gj, args, dims, patches)
    edits = _group_patches(patches)
    if dims:
        _probe_dynamic(graph, dims, edits, max_value_bytes)
    examples = _check_examples(table, specs, graph)
    return {"graph": graph, "specs": specs, "dims": dims, "patches": patches, "edits": edits,
            "producer": producer, "version": int(version), "examples": examples, "checksum": checksum}


def _read_graph(gj, max_value_bytes):
    """(graph, keys, colons): the Graph of the graph JSON `gj`, checked: its schema (exactly what
    Graph.to_json writes, sizes bounded) and, node by node as Graph.from_json builds it, what
    `verify` checks (values defined before use and once, the op's shape/dtype rule), the size of
    its output and of its temporary buffers. One walk over the nodes, each field read once: a
    large file holds 100,000s of them (a schema check, from_json and verify in turn took half as
    long again). keys, colons: what the walk saw, for safetensors_io.unique_keys."""
    _check_graph_json(gj)   # all but the nodes, which the reader checks
    keys, colons = len(gj), 0
    for k, v in gj.items():
        if k != "nodes":
            more, c = _json_counts(v)
            keys, colons = keys + more, colons + c
    for item in gj["inputs"]:
        _check_size(f"input {item['name']}", item["shape"], item["dtype"], max_value_bytes)
    reader = _NodeReader(max_value_bytes)
    try:
        graph = Graph.from_json(gj, node=reader.node)
        check_ends(graph, reader.env if graph.nodes else {v.name: v for _, v in graph.inputs})
    except GraphError as e:
        _fail(f"graph: {str(e)[:2000]}")
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:  # schema already checked
        _fail(f"graph: {e}")
    return graph, keys + reader.keys, colons + reader.colons


def _json_counts(x):
    """(keys, colons) of the JSON value x: the sum of len() of its objects and the ':' in its
    strings (for safetensors_io.unique_keys); for the small parts of a graph, whose nesting the
    schema check has bounded."""
    keys = colons = 0
    stack = [x]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            keys += len(v)
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
        elif t is str:
            colons += v.count(":")
    return keys, colons


def _short(x, n=60):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "...'"


def _parse_json(text, what):
    """Strict JSON (no repeated keys; NaN and Infinity allowed: attributes hold them). Nesting
    is bounded by the schema checks that follow, and the parser's own recursion limit."""
    try:
        return st.loads_json(text, f"metadata {what!r}", constants=True)
    except st.FormatError as e:
        _fail(str(e))


def _check_size(what, shape, dtype, max_value_bytes):
    """Value `what` ("input x", "relu -> y") of `shape` and `dtype` fits max_value_bytes."""
    if _NP[dtype].itemsize * math.prod(shape) > max_value_bytes:
        _fail(f"graph: {what} ({dtype}{list(shape)}) is larger than the limit of "
              f"{max_value_bytes} bytes (load(..., max_value_bytes=) raises it)")


def _check_scratch(n, op, max_value_bytes):
    """The temporary buffers of a kernel that allocates far more than its inputs and output
    (im2col, padding, window masks: the op's `scratch` rule) are bounded like values."""
    try:
        need = op.scratch(*[spec_of(x) if isinstance(x, Value) else x for x in n.inputs], **n.attrs)
    except Exception as e:  # the shape rule accepted the node; a hostile one may still choke this
        _fail(f"graph: {_node_str(n)}: cannot size its temporary buffers ({type(e).__name__}: {str(e)[:200]})")
    if need > max_value_bytes:
        _fail(f"graph: {_node_str(n)} needs {need} bytes of temporary buffers, more than the limit of "
              f"{max_value_bytes} bytes (load(..., max_value_bytes=) raises it)")


# ---------------------------------------------------------------- graph schema

def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _check_keys(d, keys, what, optional=()):
    if not isinstance(d, dict):
        _fail(f"{what} is a {type(d).__name__}, not an object")
    got = set(d)
    if not set(keys) <= got or not got <= set(keys) | set(optional):
        missing, extra = set(keys) - got, got - set(keys) - set(optional)
        _fail(f"{what} " + (f"lacks {sorted(missing)}" if missing else f"has unknown keys {sorted(extra)[:5]}"))


# The checks below run for every node of every file: the common case is a few type tests
# (the values come from JSON, so exact types), and a message is built only on failure.

def _check_name(x, what):
    if type(x) is not str or not 0 < len(x) <= MAX_NAME:
        _fail(f"{what} is not a name (a non-empty string of at most {MAX_NAME} characters)")


def _check_str(x, what, optional=True):
    if (x is None and optional) or (type(x) is str and len(x) <= MAX_STR):
        return
    _fail(f"{what} is not {'null or ' if optional else ''}a string of at most {MAX_STR} characters")


def _check_shape(shape, what):
    if type(shape) is not list or len(shape) > MAX_NDIM:
        _fail(f"{what}: shape is not a list of at most {MAX_NDIM} sizes")
    for s in shape:
        if type(s) is not int or not 0 <= s < MAX_SHAPE:
            _fail(f"{what}: invalid size {_short(s)} in shape (sizes are integers 0 <= n < 2**40)")


def _check_dtype(dt, what):
    if dt == "bfloat16" and dt not in _NP:   # ml_dtypes: imported only by programs that use it
        try:
            _NP[dt] = dtypes.bfloat16.np
        except ImportError:
            _fail(f"{what}: {dtypes.BF16_EXTRA}")
    if type(dt) is not str or dt not in _NP:
        _fail(f"{what}: unknown dtype {_short(dt)} (one of {', '.join(DTYPE_NAMES)})")


_VALUE_KEYS = frozenset(("name", "shape", "dtype", "device"))


def _check_value_json(d, what):
    if type(d) is not dict or d.keys() != _VALUE_KEYS:
        _check_keys(d, _VALUE_KEYS, what)
    _check_name(d["name"], f"{what}: name")
    what = f"{what} ({d['name']})"
    _check_shape(d["shape"], what)
    _check_dtype(d["dtype"], what)
    if type(d["device"]) is not str or len(d["device"]) > 64:
        _fail(f"{what}: device is not a short string")


def _check_plain(x, what, max_depth=MAX_ATTR_DEPTH, max_items=MAX_ATTR_ITEMS):
    """x is JSON-plain, nested at most max_depth deep, with at most max_items items."""
    stack = [(x, 0)]
    n = 0
    while stack:
        v, depth = stack.pop()
        if depth > max_depth:
            _fail(f"{what} is nested more than {max_depth} levels deep")
        t = type(v)
        items = v if t is list else v.values() if t is dict else (v,)
        n += len(items) if t is list or t is dict else 1
        if n > max_items:
            _fail(f"{what} has more than {max_items} items")
        if t is dict:
            for k in v:
                if len(k) > MAX_STR:
                    _fail(f"{what} holds a key longer than {MAX_STR} characters")
        for item in items:
            ti = type(item)
            if ti is int:
                if not -MAX_INT <= item < MAX_INT:
                    _fail(f"{what} holds an integer out of the 64-bit range")
            elif ti is str:
                if len(item) > MAX_STR:
                    _fail(f"{what} holds a string longer than {MAX_STR} characters")
            elif ti is list or ti is dict:
                stack.append((item, depth + 1))
            elif not (item is None or ti is bool or ti is float):
                _fail(f"{what} holds a {ti.__name__}")


def _check_tree(tree, n_outputs):
    """The output structure: {"t": i} | {"c": x} | {"none": null} | {"tuple"|"list": [...]} |
    {"dict": [[key, tree], ...]}, at most MAX_TREE_DEPTH deep."""
    stack = [(tree, 0)]
    count = 0
    while stack:
        t, depth = stack.pop()
        count += 1
        if depth > MAX_TREE_DEPTH or count > 1_000_000:
            _fail("graph: out_tree is nested too deeply or too large")
        if not isinstance(t, dict) or len(t) != 1:
            _fail(f"graph: malformed out_tree entry {_short(t)}")
        (kind, val), = t.items()
        if kind == "t":
            if not _is_int(val) or not 0 <= val < n_outputs:
                _fail(f"graph: out_tree refers to output {_short(val)}; the graph has {n_outputs}")
        elif kind == "none":
            if val is not None:
                _fail("graph: out_tree 'none' entry holds a value")
        elif kind == "c":
            if not (val is None or isinstance(val, (bool, int, float, str))):
                _fail("graph: out_tree constant is not a number or string")
            _check_plain(val, "graph: out_tree constant")
        elif kind in ("tuple", "list"):
            if not isinstance(val, list):
                _fail(f"graph: out_tree {kind} entry is not a list")
            stack.extend((x, depth + 1) for x in val)
        elif kind == "dict":
            if not isinstance(val, list):
                _fail("graph: out_tree dict entry is not a list")
            for item in val:
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int))
                        and not isinstance(item[0], bool)):
                    _fail(f"graph: malformed dict item in out_tree: {_short(item)}")
                _check_plain(item[0], "graph: out_tree dict key")
                stack.append((item[1], depth + 1))
        else:
            _fail(f"graph: unknown out_tree kind {_short(kind)}")


_NODE_KEYS = frozenset(("op", "inputs", "attrs", "out", "loc", "module"))
_INPUT_KEYS = frozenset(("kind", "name", "shape", "dtype", "device"))


def _check_graph_json(g):
    """The graph JSON has exactly the shape Graph.to_json writes, with bounded sizes (the nodes:
    _NodeReader, as they are built)."""
    _check_keys(g, ("format_version", "inputs", "nodes", "outputs", "out_tree", "mutations"), "graph",
                optional=("meta",))   # files written before the memory plan became a typed field: "meta": {}
    if g["format_version"] != GRAPH_FORMAT_VERSION or not _is_int(g["format_version"]):
        _fail(f"graph: format_version {_short(g['format_version'])} is not {GRAPH_FORMAT_VERSION}")
    for key in ("inputs", "nodes", "outputs", "mutations"):
        if not isinstance(g[key], list):
            _fail(f"graph: '{key}' is not a list")
    names = set()
    for i, item in enumerate(g["inputs"]):
        if type(item) is not dict or item.keys() != _INPUT_KEYS:
            _check_keys(item, _INPUT_KEYS, f"graph: input {i}")
        if item["kind"] not in ("arg", "external"):
            _fail(f"graph: input {i} has unknown kind {_short(item['kind'])}")
        _check_value_json({k: v for k, v in item.items() if k != "kind"}, f"graph: input {i}")
        if item["name"] in names:
            _fail(f"graph: input {item['name']!r} is defined twice")
        names.add(item["name"])
    for i, name in enumerate(g["outputs"]):
        _check_name(name, f"graph: output {i}")
    for i, m in enumerate(g["mutations"]):
        if not (isinstance(m, list) and len(m) == 2):
            _fail(f"graph: mutation {i} is not a [target, value] pair")
        _check_name(m[0], f"graph: mutation {i} target")
        _check_name(m[1], f"graph: mutation {i} value")
    if g.get("meta", {}) != {}:
        _fail(f"graph: meta {_short(g['meta'])} is not empty (a program's graph carries no backend annotations)")
    _check_tree(g["out_tree"], len(g["outputs"]))


def _check_node(node):
    """One node's JSON, slowly: _NodeReader's fast path found it malformed and this says how (a
    message relative to the node: the caller names it)."""
    _check_keys(node, _NODE_KEYS, "node")
    op = node["op"]
    if type(op) is not str or op not in OPS:
        _fail(f"unknown op {_short(op)}")
    _check_value_json(node["out"], "out")
    inputs = node["inputs"]
    if type(inputs) is not list or len(inputs) > 10_000:
        _fail("inputs is not a list")
    for j, x in enumerate(inputs):
        if type(x) is dict and len(x) == 1:
            v = x.get("value")
            if v is not None:
                _check_name(v, f"input {j}")
                continue
            if "const" in x:
                c = x["const"]
                if c is None or type(c) in (bool, float) or (type(c) is int and -MAX_INT <= c < MAX_INT):
                    continue
                _fail(f"constant input {j} is not a Python number: {_short(c)}")
        _fail(f"input {j} is not {{'value': name}} or {{'const': number}}")
    lo, hi = _arity(OPS[op])
    if not lo <= len(inputs) <= hi:
        _fail(f"has {len(inputs)} inputs; the op takes "
              f"{lo if lo == hi else f'at least {lo}'} ({', '.join(OPS[op].inputs)})")
    attrs = node["attrs"]
    if type(attrs) is not dict:
        _fail("attrs is not an object")
    if attrs:
        declared = OPS[op].attrs
        for k in attrs:
            if k not in declared:
                _fail(f"unknown attributes {sorted(set(attrs) - set(declared))[:5]} (op takes {list(declared)})")
        _check_plain(attrs, "attrs")
    _check_str(node["loc"], "loc")
    _check_str(node["module"], "module")


class _NodeReader:
    """Builds each node of a file's graph as Graph.from_json reads it (its `node`), checking it
    first: its JSON schema (the common case in line: a few type tests per field; _check_node
    explains a failure), that it reads values defined before it and defines a new one, that it
    is allowed in programs and its output fits max_value_bytes, its op's shape/dtype rule
    (verify.Rules) and its temporary buffers (the op's scratch rule). `env` is from_json's
    name -> Value of what is defined so far. keys, colons: the keys of the objects it read and
    the ':' in their strings where there may be some (loc, device): see safetensors_io.unique_keys
    (an attribute holding an object or a string with a ':' is left to its strict parse)."""
    __slots__ = ("rules", "limit", "env", "keys", "colons")

    def __init__(self, max_value_bytes):
        self.rules = Rules()
        self.limit = max_value_bytes
        self.env = {}
        self.keys = self.colons = 0

    def node(self, i, nd, env):
        self.env = env
        if type(nd) is not dict or nd.keys() != _NODE_KEYS:
            _malformed(i, nd)
        op, o, inputs, attrs, loc, module = nd["op"], nd["out"], nd["inputs"], nd["attrs"], nd["loc"], nd["module"]
        opdef = OPS.get(op) if type(op) is str else None
        if opdef is None or type(o) is not dict or o.keys() != _VALUE_KEYS:
            _malformed(i, nd)
        name, shape, dt, dev = o["name"], o["shape"], o["dtype"], o["device"]
        npdt = _NP.get(dt) if type(dt) is str else None
        if type(name) is not str or not 0 < len(name) <= MAX_NAME or type(shape) is not list \
                or len(shape) > MAX_NDIM or npdt is None or type(dev) is not str or len(dev) > 64:
            _malformed(i, nd)
        nbytes = npdt.itemsize
        for size in shape:
            if type(size) is not int or not 0 <= size < MAX_SHAPE:
                _malformed(i, nd)
            nbytes *= size
        if type(inputs) is not list or len(inputs) > 10_000:
            _malformed(i, nd)
        ins, types, undefined = [], [], None
        for x in inputs:
            if type(x) is dict and len(x) == 1:
                v = x.get("value")
                if v is not None:
                    if type(v) is str and 0 < len(v) <= MAX_NAME:
                        val = env.get(v)
                        if val is None:
                            undefined = v
                        else:
                            ins.append(val)
                            types.append((val.shape, val.dtype))
                        continue
                elif "const" in x:
                    c = x["const"]
                    if c is None or type(c) in (bool, float) or (type(c) is int and -MAX_INT <= c < MAX_INT):
                        ins.append(c)
                        types.append((type(c), c))
                        continue
            _malformed(i, nd)
        lo, hi = _arity(opdef)
        if not lo <= len(inputs) <= hi or type(attrs) is not dict \
                or not (loc is None or (type(loc) is str and len(loc) <= MAX_STR)) \
                or not (module is None or (type(module) is str and len(module) <= MAX_STR)):
            _malformed(i, nd)
        if attrs:
            declared = opdef.attrs
            for k in attrs:
                if k not in declared:
                    _malformed(i, nd)
            try:
                _check_plain(attrs, "attrs")
            except _Invalid:
                _malformed(i, nd)
        self.keys += 10 + len(inputs) + len(attrs)   # node 6, out 4, each input 1
        if loc is not None:
            self.colons += loc.count(":")
        if dev != "cpu":
            self.colons += dev.count(":")
        # well-formed JSON: now what it means
        if undefined is not None:
            _fail(f"graph: node {name} ({op}) reads undefined value {undefined!r}")
        if op in NOT_IN_PROGRAMS:
            _fail(f"graph: node {name} uses op {op!r}, which programs may not contain")
        if nbytes > self.limit:
            _fail(f"graph: {op} -> {name} ({dt}{shape}) is larger than the limit of {self.limit} bytes "
                  "(load(..., max_value_bytes=) raises it)")
        if name in env:
            _fail(f"graph: node {i} ({op} -> {name}): redefines value {name!r}")
        env[name] = out = Value(name, shape, dt, dev)
        n = Node(op, ins, attrs, out, loc, module)
        _check_node_types(self.rules, i, n, opdef, tuple(types), self.limit)
        return n


def _malformed(i, nd):
    """Raise _Invalid naming node i and what is wrong with its JSON `nd`."""
    try:
        _check_node(nd)
    except _Invalid as e:  # name the node: "graph: node 3 (relu): ..."
        op = nd.get("op") if isinstance(nd, dict) else None
        label = f" ({op})" if isinstance(op, str) and op in OPS else ""
        raise _Invalid(f"graph: node {i}{label}: {e}") from None
    _fail(f"graph: node {i} is malformed")   # (_check_node is as strict as the reader's fast path)


def _check_node_types(rules, i, n, op, types, max_value_bytes):
    """Node i's op's shape/dtype rule gives its declared output type for inputs of `types` (see
    verify.Rules), and its temporary buffers fit max_value_bytes (after the rule: the attributes
    are checked then)."""
    try:
        rules.check(i, n, op, types)
    except GraphError as e:
        _fail(f"graph: {str(e)[:2000]}")
    except Exception as e:  # an op's shape rule that chokes on a hostile attribute
        _fail(f"graph: an op's shape/dtype rule rejected its inputs ({type(e).__name__}: {str(e)[:500]})")
    if op.scratch is not None:
        _check_scratch(n, op, max_value_bytes)


# ---------------------------------------------------------------- dynamic sizes and input specs

def _resolve(root, path):
    """The container and key that `path` (a list of keys/indices) names in the graph JSON (whose
    schema the loader has checked: a node's "out" holds a "shape" list)."""
    if len(path) == 5 and path[2] == "out" and path[0] == "nodes":   # the common case: a node's size
        nodes, i, j = root["nodes"], path[1], path[4]
        if type(i) is int and 0 <= i < len(nodes) and type(j) is int and path[3] == "shape":
            shape = nodes[i]["out"]["shape"]
            if 0 <= j < len(shape):
                return shape, j
    node = root
    for key in path[:-1]:
        node = _step(node, key, path)
    last = path[-1]
    _step(node, last, path)
    return node, last


def _step(node, key, path):
    t = type(node)
    if t is dict:
        if type(key) is str and key in node:
            return node[key]
    elif t is list and type(key) is int and 0 <= key < len(node):
        return node[key]
    _fail(f"dynamic: patch path {_short(path)} does not name an entry of the graph")


def _allowed_path(p):
    if len(p) == 4 and p[0] == "inputs" and p[2] == "shape":
        return True
    if len(p) == 5 and p[0] == "nodes" and p[2] == "out" and p[3] == "shape":
        return True
    if len(p) >= 4 and p[0] == "nodes" and p[2] == "attrs":
        return True
    return len(p) == 5 and p[0] == "nodes" and p[2] == "inputs" and p[4] == "const"


def _check_dynamic(d, gj):
    _check_keys(d, ("dims", "patches"), "dynamic")
    dims, patches = d["dims"], d["patches"]
    if not isinstance(dims, dict) or len(dims) > 64:
        _fail("dynamic: 'dims' is not an object of at most 64 dimensions")
    out_dims = {}
    for name, info in dims.items():
        if not (name.isidentifier() and len(name) <= 64):
            _fail(f"dynamic: dimension name {_short(name)} is not an identifier")
        _check_keys(info, ("example", "min", "max"), f"dynamic: dimension {name!r}")
        lo, hi, ex = info["min"], info["max"], info["example"]
        if not (_is_int(lo) and _is_int(ex) and (hi is None or _is_int(hi))
                and 0 <= lo <= ex < MAX_SHAPE and (hi is None or ex <= hi < MAX_SHAPE)):
            _fail(f"dynamic: dimension {name!r} needs integers 0 <= min <= example <= max < 2**40")
        out_dims[name] = (lo, hi, ex)
    if not isinstance(patches, list) or len(patches) > 1_000_000:
        _fail("dynamic: 'patches' is not a list")
    binding = {n: ex for n, (_, _, ex) in out_dims.items()}
    seen = set()
    exprs = {}   # (c0, k, *dims) -> (its SizeExpr, its value at the example sizes): a table repeats few
    out = []
    for i, p in enumerate(patches):
        if type(p) is not list or len(p) != 4:
            _fail(f"dynamic: patch {i} is not [path, c0, k, dims]")
        path, c0, k, syms = p
        if type(path) is not list or not 0 < len(path) <= MAX_ATTR_DEPTH + 4:
            _fail(f"dynamic: patch {i}: path is not a list of keys and indices")
        for x in path:
            if type(x) is not str and type(x) is not int:
                _fail(f"dynamic: patch {i}: path is not a list of keys and indices")
        if not _allowed_path(path):
            _fail(f"dynamic: patch {i}: path {_short(path)} is not a shape, attribute or constant of the graph")
        key = tuple(path)
        if key in seen:
            _fail(f"dynamic: patch {i}: path {_short(path)} is patched twice")
        seen.add(key)
        if not (type(c0) is int and type(k) is int and abs(c0) < MAX_SHAPE and 0 < abs(k) < MAX_SHAPE):
            _fail(f"dynamic: patch {i}: coefficients must be integers of magnitude below 2**40 (k nonzero)")
        try:
            known = exprs.get((c0, k, *syms)) if type(syms) is list else None
        except TypeError:   # (an unhashable entry in dims: not a dimension name)
            known = None
        if known is None:
            if type(syms) is not list or not 0 < len(syms) <= 8 or \
                    not all(type(x) is str and x in out_dims for x in syms) or len(set(syms)) != len(syms):
                _fail(f"dynamic: patch {i}: dims {_short(syms)} are not distinct declared dynamic dimensions")
            expr = SizeExpr.affine(c0, k, syms)
            known = exprs[(c0, k, *syms)] = expr, expr(binding)
        container, last = _resolve(gj, path)
        value = container[last]
        if type(value) is not int:
            _fail(f"dynamic: patch {i}: path {_short(path)} names a {type(value).__name__}, not an integer")
        expr, example = known
        if example != value:
            _fail(f"dynamic: patch {i}: {expr} at the example sizes is {example}, but the graph holds {value}")
        out.append((key, expr))
    return out_dims, out


def _group_patches(patches):
    """The patches grouped once at load by what they edit: {"inputs" | "nodes": {index: [(the
    rest of the path, its SizeExpr)]}}, in table order (each specialisation walks these groups)."""
    edits = {"inputs": {}, "nodes": {}}
    for path, expr in patches:
        group = edits[path[0]]
        mine = group.get(path[1])
        if mine is None:
            mine = group[path[1]] = []
        mine.append((path[2:], expr))
    return edits


def _specialise(graph, edits, binding, max_value_bytes, build=True):
    """The graph at other dynamic sizes, checked like a loaded file: new Values and Nodes where
    the patches (`edits`, grouped by _group_patches) reach (attributes' containers copied on the
    patch's path), the rest shared with `graph`, which stays as it is and whose names and
    structure are checked already; each new integer is checked for its place (a size, an
    attribute or a constant), each new node as the loader checks one (its output's size, its
    op's shape rule, its temporary buffers), in one walk. Those checks depend only on the node's
    op, input types, attributes and output type: a node that repeats an earlier one's is not
    checked again (a large graph repeats a few layers' nodes 1000s of times). build=False (the
    loader's probe, which only checks): a node that repeats an earlier one is not even built, and
    the graph returned keeps `graph`'s nodes."""
    values = {}  # id of a SizeExpr (the loader shares equal ones) -> its value at `binding`
    for group in (*edits["inputs"].values(), *edits["nodes"].values()):
        for _, expr in group:
            if id(expr) not in values:
                values[id(expr)] = expr(binding)
    if not all(0 <= v < MAX_SHAPE for v in values.values()):
        _check_patch_values(edits, values)
    resized = {}   # value name -> its Value at these sizes
    inputs = []
    for i, (kind, v) in enumerate(graph.inputs):
        mine = edits["inputs"].get(i)
        if mine is not None:
            v = _resized(v, [(rest, values[id(e)]) for rest, e in mine], resized)
            _check_size(f"input {v.name}", v.shape, v.dtype, max_value_bytes)
        inputs.append((kind, v))
    defined = {v.name: v for _, v in inputs}
    rules = Rules()
    checked = set()   # (op, input types, attributes, output type) of the nodes checked so far
    nodes, node_edits = [], edits["nodes"]
    for i, n in enumerate(graph.nodes):
        mine = node_edits.get(i)
        ins, types, changed = [], [], mine is not None
        for x in n.inputs:
            if isinstance(x, Value):
                v = resized.get(x.name)
                if v is not None:
                    x, changed = v, True
                types.append((x.shape, x.dtype))
            else:
                types.append((type(x), x))
            ins.append(x)
        if not changed:
            nodes.append(n)
            defined[n.out.name] = n.out
            continue
        attrs, copies, shape, out = n.attrs, {}, None, n.out
        for rest, expr in mine or ():
            value = values[id(expr)]
            if rest[0] == "out":   # ("out", "shape", j)
                if shape is None:
                    shape = list(out.shape)
                shape[rest[2]] = value
            elif rest[0] == "inputs":
                ins[rest[1]] = value
                types[rest[1]] = (int, value)
            else:   # an attribute, maybe inside nested lists: each container on the way copied once
                box = attrs = _own(copies, attrs)
                for key in rest[1:-1]:
                    box[key] = box = _own(copies, box[key])
                box[rest[-1]] = value
        if shape is not None:
            out = resized[out.name] = Value(out.name, shape, out.dtype, out.device)
        defined[out.name] = out
        types = tuple(types)
        key = (n.op, types, repr(attrs) if attrs else "", out.shape, out.dtype)
        if key in checked:
            if build:
                nodes.append(n.copy_with(inputs=ins, attrs=attrs, out=out))
            continue
        checked.add(key)
        n = n.copy_with(inputs=ins, attrs=attrs, out=out)
        nodes.append(n)
        _check_size(f"{n.op} -> {out.name}", out.shape, out.dtype, max_value_bytes)
        _check_node_types(rules, i, n, OPS[n.op], types, max_value_bytes)
    if not build:   # (check_ends reads the nodes' names alone: the same)
        nodes = graph.nodes
    graph = graph.copy(inputs=inputs, nodes=nodes, outputs=[resized.get(v.name, v) for v in graph.outputs],
                       mutations=[(t, resized.get(v.name, v)) for t, v in graph.mutations])
    try:
        check_ends(graph, defined)
    except GraphError as e:
        _fail(f"graph: {str(e)[:2000]}")
    return graph


def _check_patch_values(edits, values):
    """Each patched integer fits its place: a size in [0, 2**40), an attribute or a constant a
    64-bit integer (`values`: id of a SizeExpr -> its value; some are out of [0, 2**40))."""
    for kind, index, group in [(k, i, g) for k, groups in edits.items() for i, g in groups.items()]:
        for rest, expr in group:
            value = values[id(expr)]
            if not 0 <= value < MAX_SHAPE:
                where = "attribute" if kind == "nodes" and rest[0] == "attrs" else \
                    "constant" if rest[-1] == "const" else "size"
                if where == "size" or not -MAX_INT <= value < MAX_INT:
                    _fail(f"dynamic: {_short([kind, index, *rest])} would be {value}, out of range for a {where}")


def _own(copies, container):
    """This specialisation's copy of a (JSON) container: `copies` maps the id of the original,
    and of the copy, to the copy."""
    mine = copies.get(id(container))
    if mine is None:
        mine = copies[id(container)] = container.copy()
        copies[id(mine)] = mine
    return mine


def _resized(v, shape_edits, resized):
    """Value v with the sizes that `shape_edits` ([(("shape", j), size)]) give, noted in `resized`
    by name; v itself when there are none."""
    if not shape_edits:
        return v
    shape = list(v.shape)
    for (_, j), size in shape_edits:
        shape[j] = size
    v = resized[v.name] = Value(v.name, shape, v.dtype, v.device)
    return v


def _probe_dynamic(graph, dims, edits, max_value_bytes):
    """The size table must give a valid graph at other sizes too: try the sizes export traced
    last (each dynamic size + 3), so a table with a missing or wrong entry fails at load time."""
    binding = {}
    for name, (lo, hi, ex) in dims.items():
        binding[name] = ex + 3 if hi is None else min(ex + 3, hi)
    try:
        _specialise(graph, edits, binding, max_value_bytes, build=False)
    except _Invalid as e:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
        _fail(f"dynamic: the size table gives an invalid graph at {sizes}: {e}")


def _check_specs(specs, gj, args, dims, patches):
    """Each spec matches its graph argument; a named size is exactly a dynamic dimension."""
    arg_index = [i for i, item in enumerate(gj["inputs"]) if item["kind"] == "arg"]
    on_inputs = {}
    for path, expr in patches:
        if path[0] == "inputs":
            if gj["inputs"][path[1]]["kind"] != "arg":
                _fail(f"dynamic: external input {gj['inputs'][path[1]]['name']!r} cannot have a dynamic size")
            on_inputs[(path[1], path[3])] = expr
    if not isinstance(specs, list) or len(specs) != len(args):
        _fail(f"inputs: expected a list of {len(args)} input specs (one per graph argument)")
    out = []
    used = set()
    for i, (spec, v, gi) in enumerate(zip(specs, args, arg_index)):
        what = f"inputs: spec {i}"
        _check_keys(spec, ("name", "path", "shape", "dtype"), what)
        if spec["name"] != v.name:
            _fail(f"{what} is for {_short(spec['name'])} but graph argument {i} is {v.name!r}")
        what = f"inputs: spec {i} ({v.name})"
        _check_str(spec["path"], f"{what}: path", optional=False)
        if spec["dtype"] != v.dtype:
            _fail(f"{what}: dtype {_short(spec['dtype'])} but the graph reads {v.dtype}")
        shape = spec["shape"]
        if not isinstance(shape, list) or len(shape) != len(v.shape):
            _fail(f"{what}: shape {_short(shape)} does not match the graph's {list(v.shape)}")
        for j, (s, n) in enumerate(zip(shape, v.shape)):
            patch = on_inputs.pop((gi, j), None)
            if isinstance(s, str):
                if s not in dims:
                    _fail(f"{what}: size {s!r} is not a declared dynamic dimension")
                if patch != SizeExpr.affine(0, 1, (s,)) or dims[s][2] != n:
                    _fail(f"{what}: dynamic size {s!r} of dimension {j} does not match the graph")
                used.add(s)
            elif not _is_int(s) or s != n or patch is not None:
                _fail(f"{what}: size {_short(s)} of dimension {j} does not match the graph's {n}")
        out.append((v.name, spec["path"], tuple(shape), _NP[v.dtype]))
    if on_inputs:
        (gi, j), _ = next(iter(on_inputs.items()))
        _fail(f"dynamic: size {j} of input {gj['inputs'][gi]['name']!r} is patched but its spec is static")
    if set(dims) - used:
        _fail(f"dynamic: dimensions {sorted(set(dims) - used)} appear in no input spec")
    return out


def _check_examples(table, specs, graph):
    """Example tensors, when present: all inputs and all outputs, of the example types."""
    ins = sorted(k for k in table if k.startswith(EXAMPLE_IN))
    outs = sorted(k for k in table if k.startswith(EXAMPLE_OUT))
    externals = {v.name for v in graph.externals()}
    extra = set(table) - externals - set(ins) - set(outs)
    if extra:
        _fail(f"the file holds tensors the graph does not read: {sorted(extra)[:5]}")
    if not ins and not outs:
        return None
    if (set(ins) != {f"{EXAMPLE_IN}{i}" for i in range(len(specs))}
            or set(outs) != {f"{EXAMPLE_OUT}{i}" for i in range(len(graph.outputs))}):
        _fail(f"example tensors must be {EXAMPLE_IN}0..{len(specs) - 1} and "
              f"{EXAMPLE_OUT}0..{len(graph.outputs) - 1}")
    args = graph.args()
    for i, ((name, _, _, dt), v) in enumerate(zip(specs, args)):
        if table[f"{EXAMPLE_IN}{i}"] != (dt, tuple(v.shape)):
            _fail(f"example input {i} is not {v.dtype}{list(v.shape)}")
    for i, v in enumerate(graph.outputs):
        if table[f"{EXAMPLE_OUT}{i}"] != (_NP[v.dtype], tuple(v.shape)):
            _fail(f"example output {i} is not {v.dtype}{list(v.shape)}")
    return len(specs), len(graph.outputs)


# ================================================================ running

def _xp_of_inputs(arrays):
    """numpy, or cupy when the inputs are cupy arrays (all of them)."""
    gpu = [hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray) for a in arrays]
    if not any(gpu):
        return np
    if not all(gpu):
        raise ProgramInputError("inputs mix numpy and cupy arrays; pass all of them on one device")
    from .device import require_cupy
    return require_cupy("running a program on cupy arrays")


class LoadedProgram:
    """A validated program: call it with arrays in the exported input order.

    `prog(x, y)` checks each array against its spec (dtype exactly, static sizes exactly,
    named dynamic sizes consistently), runs the graph with numpy -- or cupy, when the inputs
    are cupy arrays -- and returns arrays in the structure the exported function returned.

    Attributes: graph (the IR, at the example sizes), weights (name -> read-only array),
    input_specs (list of {"name", "path", "shape", "dtype"}), dynamic_dims
    (name -> {"example", "min", "max"}), eagerc_version (the producer), format_version,
    checksum ("sha256:<hex>", verified; None for a format-1 file or in-memory parts),
    example_inputs / example_outputs (lists of arrays, or None), path.
    """

    def __init__(self, spec, arrays, where="<program>", max_value_bytes=MAX_VALUE_BYTES):
        self.path = where
        self.graph = spec["graph"]
        self.eagerc_version = spec["producer"]
        self.format_version = spec["version"]
        self.checksum = spec.get("checksum")
        self._specs = spec["specs"]
        self._dims = spec["dims"]
        self._patches = spec["patches"]
        self._edits = spec["edits"]
        self._max_value_bytes = max_value_bytes
        ex = spec["examples"]
        self.example_inputs = None if ex is None else [arrays.pop(f"{EXAMPLE_IN}{i}") for i in range(ex[0])]
        self.example_outputs = None if ex is None else [arrays.pop(f"{EXAMPLE_OUT}{i}") for i in range(ex[1])]
        for a in arrays.values():
            a.flags.writeable = False
        self.weights = arrays
        self._device_weights = {}   # (cupy, device id) -> name -> cupy array
        self._plans = {}   # (xp name, sizes or None: the example sizes) -> Plan, bound on first use
        self._example_binding = {n: ex for n, (_, _, ex) in self._dims.items()}

    # ------------------------------------------------------------ description
    @property
    def input_specs(self):
        return [{"name": n, "path": p, "shape": list(s), "dtype": dt.name} for n, p, s, dt in self._specs]

    @property
    def dynamic_dims(self):
        return {n: {"example": ex, "min": lo, "max": hi} for n, (lo, hi, ex) in self._dims.items()}

    def signature(self):
        args = ", ".join(f"{p}: {dt.name}[{', '.join(map(str, s))}]" for _, p, s, dt in self._specs)
        return f"({args})"

    def __repr__(self):
        return (f"<eagerc program {self.path} {self.signature()}: {len(self.graph.nodes)} ops, "
                f"{len(self.weights)} weights, format {self.format_version}, "
                f"eagerc {self.eagerc_version}>")

    def __str__(self):
        return str(self.graph)

    def symbolic_shapes(self):
        """value name -> shape with each dynamic size written as its expression ("batch",
        "2*batch"), for the values whose shape depends on dynamic sizes."""
        shapes = {}
        for path, expr in self._patches:
            if path[0] == "inputs" and path[2] == "shape":
                v, j = self.graph.inputs[path[1]][1], path[3]
            elif path[0] == "nodes" and path[2] == "out":
                v, j = self.graph.nodes[path[1]].out, path[4]
            else:
                continue
            shapes.setdefault(v.name, list(v.shape))[j] = str(expr)
        return {name: tuple(s) for name, s in shapes.items()}

    # ------------------------------------------------------------ calls
    def __call__(self, *inputs):
        if len(inputs) != len(self._specs):
            raise ProgramInputError(f"{self.path}: the program takes {len(self._specs)} inputs "
                                    f"{self.signature()}, got {len(inputs)}")
        xp = _xp_of_inputs(inputs)
        arrays, binding = self._check_inputs(inputs, xp)
        plan = self._plan(xp, binding)
        env = dict(self._weights_on(xp, arrays))
        for (name, _, _, _), a in zip(self._specs, arrays):
            env[name] = a
        outs, mutations = plan(env)
        for target, arr in mutations:  # state updates (e.g. batch-norm running stats in train mode)
            self._mutate(target, arr, xp)
        outs = [a if getattr(a.flags, "writeable", True) else a.copy() for a in outs]
        return unflatten(self.graph.out_tree, outs)

    def _check_inputs(self, inputs, xp):
        arrays = []
        binding = {}
        for i, ((name, path, shape, dtype), a) in enumerate(zip(self._specs, inputs)):
            if xp is np and not isinstance(a, np.ndarray):
                try:
                    a = np.asarray(a)
                except Exception as e:
                    raise ProgramInputError(f"{self.path}: input {i} ({path}) is not an array: {e}") from None
            if a.dtype != dtype:
                raise ProgramInputError(f"{self.path}: input {i} ({path}) has dtype {a.dtype}, the program "
                                        f"expects {dtype.name} (convert it with .astype)")
            if len(a.shape) != len(shape):
                raise ProgramInputError(f"{self.path}: input {i} ({path}) has shape {list(a.shape)}, the "
                                        f"program expects {list(shape)}")
            for j, (n, s) in enumerate(zip(a.shape, shape)):
                if isinstance(s, str):
                    if binding.setdefault(s, n) != n:
                        raise ProgramInputError(f"{self.path}: input {i} ({path}) has size {n} in dimension "
                                                f"{j} ({s!r}), but an earlier input has {s} = {binding[s]}")
                elif s != n:
                    raise ProgramInputError(f"{self.path}: input {i} ({path}) has shape {list(a.shape)}, the "
                                            f"program expects {list(shape)}")
            if xp is np and a.flags.writeable:  # no kernel may write into the caller's arrays
                a = a.view()
                a.flags.writeable = False
            arrays.append(a)
        for s, n in binding.items():
            lo, hi, _ = self._dims[s]
            if n < lo or (hi is not None and n > hi):
                raise ProgramInputError(f"{self.path}: dynamic size {s} = {n} is outside the exported range "
                                        f"[{lo}, {'inf' if hi is None else hi}]")
        return arrays, binding

    def _plan(self, xp, binding=None):
        """The executor's plan for these sizes on array module xp, bound on first use."""
        sizes = None if not binding or binding == self._example_binding else tuple(sorted(binding.items()))
        key = (xp.__name__, sizes)
        p = self._plans.get(key)
        if p is None:
            graph = self.graph if sizes is None else self._specialise(binding)
            p = self._plans[key] = Plan(graph, xp, check=True, where=self.path,
                                        bound=bind(graph) if xp is np else None)
            if len(self._plans) > MAX_SPECIALISATIONS + 1:
                del self._plans[next(k for k in self._plans if k[1] is not None and k != key)]
        return p

    def _specialise(self, binding):
        try:
            return _specialise(self.graph, self._edits, binding, self._max_value_bytes)
        except _Invalid as e:
            sizes = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
            raise ProgramInputError(f"{self.path}: the program does not support sizes {sizes}: {e}") from None

    def _weights_on(self, xp, arrays):
        if xp is np:
            return self.weights
        dev = arrays[0].device.id if arrays else None
        w = self._device_weights.get(dev)
        if w is None:
            with xp.cuda.Device(dev or 0):
                w = self._device_weights[dev] = {k: xp.asarray(v) for k, v in self.weights.items()}
        return w

    def _mutate(self, target, arr, xp):
        if xp is np:
            host = np.array(arr, copy=True)
        else:
            host = arr.get()
            for w in self._device_weights.values():
                w[target] = arr.copy()
        host.flags.writeable = False
        self.weights[target] = host

    # ------------------------------------------------------------ self check
    def self_check(self, rtol=1e-5, atol=1e-6):
        """Run the stored example inputs and compare with the stored example outputs."""
        if self.example_inputs is None:
            raise ProgramRunError(f"{self.path}: the file has no example inputs to check against "
                                  "(export with include_example_inputs=True)")
        outs, _ = self._plan(np)(dict(self.weights, **{n: a for (n, _, _, _), a in
                                                        zip(self._specs, self.example_inputs)}))
        for i, (got, want) in enumerate(zip(outs, self.example_outputs)):
            if want.dtype.kind in "biu":
                ok = np.array_equal(got, want)
            else:
                with np.errstate(all="ignore"):
                    ok = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
            if not ok:
                raise ProgramRunError(f"{self.path}: self-check failed: output {i} differs from the example "
                                      f"output stored at export time")
        return True
