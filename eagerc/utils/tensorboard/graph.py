"""add_graph's GraphDef: the model traced by eagerc.export (eval mode, no_grad, as PyTorch's
add_graph traces it) and each IR node written as a NodeDef.

TensorBoard groups nodes by the `/`-separated scopes of their names, so a node is named after the
module that ran it, as PyTorch names them: `Net/Sequential[layers]/Linear[0]/t3`. Graph inputs
are `input/<argument>`, parameters and buffers sit in their module's scope, outputs are `output/<i>`.
Every node carries `_output_shapes` and `dtype`, and `attr`, the IR's own line for it (op,
attributes, the user's file:line).
"""
from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DataType
from tensorboard.compat.proto.versions_pb2 import VersionDef

__all__ = ["graph_def"]

_TF_DTYPES = {"float16": "DT_HALF", "bfloat16": "DT_BFLOAT16", "float32": "DT_FLOAT", "float64": "DT_DOUBLE",
              "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
              "uint8": "DT_UINT8", "bool": "DT_BOOL", "complex64": "DT_COMPLEX64",
              "complex128": "DT_COMPLEX128"}


def graph_def(model, input_to_model):
    """The GraphDef of `model(*input_to_model)` (a tensor is one argument)."""
    from ...compiler.export import export
    from ...nn.modules.module import Module
    program = export(model, input_to_model if isinstance(input_to_model, tuple) else (input_to_model,))
    graph = program.graph
    root = type(model).__name__ if isinstance(model, Module) else getattr(model, "__name__", "model")
    scopes = _module_scopes(model, root) if isinstance(model, Module) else {}
    buffers = {n for n, _ in model.named_buffers()} if isinstance(model, Module) else set()

    def scope(path):
        return scopes.get(path or "", root)

    names, nodes = {}, []
    for spec, value in zip(program.input_specs, graph.args()):
        names[value.name] = f"input/{spec.get('path') or value.name}"
        nodes.append(_node(names[value.name], "IO Node", [], value))
    for value in graph.externals():
        owner, _, leaf = value.name.rpartition(".")
        names[value.name] = f"{scope(owner)}/{leaf}"
        nodes.append(_node(names[value.name], "Buffer" if value.name in buffers else "Parameter", [], value))
    for n in graph.nodes:
        names[n.out.name] = f"{scope(n.module)}/{n.out.name}"
        nodes.append(_node(names[n.out.name], n.op, [names[v.name] for v in n.input_values()], n.out, repr(n)))
    for i, value in enumerate(graph.outputs):
        nodes.append(_node(f"output/output.{i}", "IO Node", [names[value.name]], value))
    return GraphDef(node=nodes, versions=VersionDef(producer=22))


def _module_scopes(model, root):
    """{module path: "Root/Class[name]/Class[name]"} for every submodule (PyTorch's scope names)."""
    scopes = {"": root}
    for path, m in model.named_modules():
        if path:
            parent, _, name = path.rpartition(".")
            scopes[path] = f"{scopes[parent]}/{type(m).__name__}[{name}]"
    return scopes


def _node(name, op, inputs, value, attr=""):
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=d if isinstance(d, int) else -1) for d in value.shape])
    attrs = {"_output_shapes": AttrValue(list=AttrValue.ListValue(shape=[shape])),
             "dtype": AttrValue(type=DataType.Value(_TF_DTYPES.get(value.dtype, "DT_INVALID")))}
    if attr:
        attrs["attr"] = AttrValue(s=attr.encode("utf-8"))
    return NodeDef(name=name, op=op, input=inputs, attr=attrs)
