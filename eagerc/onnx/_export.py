"""eagerc.onnx.export: the entry point (what to trace, names, dynamic axes, writing the file)."""
import numpy as np

from ._convert import Builder, OnnxExportError

MIN_OPSET = 17


def _require_onnx():
    try:
        import onnx
        import onnx.helper  # noqa: F401
        import onnx.numpy_helper  # noqa: F401
    except ImportError as e:
        raise ImportError("eagerc.onnx.export needs the `onnx` package (pip install onnx); "
                          f"importing it failed: {e}") from None
    return onnx


def _as_program(obj):
    """(graph, weights, input specs, dims, patches) of a Program or a loaded runtime program, or None."""
    from ..compiler.export import Program
    from ..runtime.sizes import from_table
    if isinstance(obj, Program):
        dyn = obj.dynamic or {"dims": {}, "patches": []}
        return (obj.graph, obj.weights, obj.input_specs, dict(dyn["dims"]),
                [from_table(p) for p in dyn["patches"]])
    try:
        from ..runtime.program import LoadedProgram
    except ImportError:  # pragma: no cover
        LoadedProgram = ()
    if isinstance(obj, LoadedProgram):
        return obj.graph, obj.weights, obj.input_specs, obj.dynamic_dims, list(obj._patches)
    return None


def _trace(fn, example_args, dynamic_shapes=None):
    from ..compiler.export import ExportError, export as eagerc_export
    try:
        return eagerc_export(fn, example_args, dynamic_shapes=dynamic_shapes)
    except ExportError as e:
        raise OnnxExportError(f"eagerc.onnx.export: tracing failed: {e}") from None


def _widened(args, shapes):
    """The example arguments with every dynamic axis of size 1 doubled.

    torch.onnx.export users trace with a batch of one; eagerc's dynamic shapes need an example
    size >= 2 on a dynamic axis (a size-1 trace cannot tell a batch from a broadcast). The ONNX
    graph is symbolic in those axes, so which size the trace saw does not show in the model;
    only the static axes keep their example sizes."""
    import eagerc
    out = []
    for a, axes in zip(args, shapes):
        for ax in axes or ():
            if a.shape[ax] == 1:
                a = eagerc.cat([a.detach(), a.detach()], dim=ax)
        out.append(a)
    return tuple(out)


def _default_input_names(specs):
    names, seen = [], set()
    for i, s in enumerate(specs):
        p = s.get("path") or ""
        name = p if p.isidentifier() and p not in seen else f"input_{i}"
        seen.add(name)
        names.append(name)
    return names


def _axes_spec(spec, what, name):
    """dynamic_axes entry -> {axis: dim name}."""
    if isinstance(spec, dict):
        out = {}
        for ax, dim in spec.items():
            if not isinstance(ax, int) or not isinstance(dim, str) or not dim:
                raise OnnxExportError(f"eagerc.onnx.export: dynamic_axes[{name!r}] must map int axes to "
                                      f"names, got {spec!r}")
            out[ax] = dim
        return out
    if isinstance(spec, (list, tuple)) and all(isinstance(a, int) for a in spec):
        return {ax: f"{name}_dynamic_axes_{ax}" for ax in spec}
    raise OnnxExportError(f"eagerc.onnx.export: dynamic_axes[{name!r}] ({what}) must be a dict "
                          f"{{axis: name}} or a list of axes, got {spec!r}")


def export(fn_or_module_or_program, example_args=None, path=None, opset=MIN_OPSET, input_names=None,
           output_names=None, dynamic_axes=None, *, example_kwargs=None, check=True, doc_string=None):
    """Export to an ONNX model; write it to `path` (a file name or a binary file object) when
    given, and return the `onnx.ModelProto`.

    fn_or_module_or_program: a Module, a function (its modules' weights become initializers),
        an `eagerc.compile`d module, an `eagerc.compiler.export.Program` or a loaded
        `eagerc.runtime` program (then example_args may be None).
    example_args: a tuple of example arguments (a single tensor is one argument).
    opset: the ONNX opset, 17 or newer (LayerNormalization needs 17).
    input_names / output_names: names for the flattened tensor inputs and outputs
        (default: the parameter names, and "output" / "output_0", "output_1", ...).
    dynamic_axes: {input or output name: {axis: "dim_name"} or [axes]}, as in
        torch.onnx.export: those sizes become symbolic. Input axes are traced with eagerc's
        dynamic shapes (needs plain tensor arguments; for anything else export a Program with
        eagerc.export(..., dynamic_shapes=...) and pass it); a Program's own dynamic sizes
        are used as they are.
    check: run onnx.checker.check_model on the result.

    Raises UnsupportedOpError naming the op and the source line of a node with no ONNX
    conversion, OnnxExportError for other problems.
    """
    onnx = _require_onnx()
    import eagerc
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise OnnxExportError(f"eagerc.onnx.export: opset must be an int >= {MIN_OPSET}, got {opset!r}")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise OnnxExportError(f"eagerc.onnx.export: opset {opset} is newer than the installed onnx "
                              f"package supports ({newest})")
    dynamic_axes = dict(dynamic_axes or {})

    prog = _as_program(fn_or_module_or_program)
    if prog is None:
        if example_args is None:
            raise OnnxExportError("eagerc.onnx.export: example_args are needed to trace a function or module")
        if example_kwargs:
            raise OnnxExportError("eagerc.onnx.export: pass the example arguments positionally")
        fn = fn_or_module_or_program
        program = _trace(fn, example_args)
        specs = program.input_specs
        in_names = list(input_names) if input_names is not None else _default_input_names(specs)
        dyn_in = {k: v for k, v in dynamic_axes.items() if k in in_names}
        if dyn_in:
            args = example_args if isinstance(example_args, tuple) else (example_args,)
            if len(args) != len(specs) or not all(hasattr(a, "shape") for a in args):
                raise OnnxExportError("eagerc.onnx.export: dynamic_axes on inputs needs plain tensor arguments; "
                                      "for other argument structures export with eagerc.export(..., "
                                      "dynamic_shapes=...) and pass the Program")
            shapes = tuple(_axes_spec(dyn_in[n], "input", n) if n in dyn_in else None for n in in_names)
            program = _trace(fn, _widened(args, shapes), dynamic_shapes=shapes)
        prog = _as_program(program)
    graph, weights, specs, dims, patches = prog
    in_names = list(input_names) if input_names is not None else _default_input_names(specs)
    if len(in_names) != len(specs):
        raise OnnxExportError(f"eagerc.onnx.export: {len(in_names)} input_names for {len(specs)} tensor inputs")
    n_out = len(graph.outputs)
    if output_names is None:
        out_names = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
    else:
        out_names = list(output_names)
        if len(out_names) != n_out:
            raise OnnxExportError(f"eagerc.onnx.export: {len(out_names)} output_names for {n_out} tensor outputs")
    if len(set(in_names + out_names)) != len(in_names) + len(out_names):
        raise OnnxExportError("eagerc.onnx.export: input and output names must be distinct")
    unknown = [k for k in dynamic_axes if k not in in_names and k not in out_names]
    if unknown:
        raise OnnxExportError(f"eagerc.onnx.export: dynamic_axes names {unknown}, which are neither inputs "
                              f"{in_names} nor outputs {out_names}")
    out_axes = {out_names.index(k): _axes_spec(v, "output", k) for k, v in dynamic_axes.items() if k in out_names}

    b = Builder(onnx, graph, opset, weights, specs, in_names, dims, patches)
    g = b.build(out_names, out_axes)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(g, opset_imports=opsets, producer_name="eagerc",
                                   producer_version=eagerc.__version__,
                                   doc_string=doc_string or "exported by eagerc.onnx.export")
    # the oldest IR version that has this opset: runtimes older than the onnx package still load it
    model.ir_version = max(8, onnx.helper.find_min_ir_version_for(opsets))
    big = sum(np.asarray(w).nbytes for w in weights.values()) > 1_800_000_000
    if check and not big:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise OnnxExportError(f"eagerc.onnx.export: the ONNX checker rejects the model (an eagerc bug): "
                                  f"{e}") from None
    if path is not None:
        if big and isinstance(path, str):
            import os
            onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=os.path.basename(path) + ".data")
            if check:
                onnx.checker.check_model(path)
        else:
            onnx.save_model(model, path)
    return model
