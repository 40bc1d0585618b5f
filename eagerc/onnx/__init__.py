"""`eagerc.onnx.export`: hand an eagerc model to the ONNX ecosystem.

    import eagerc.onnx
    eagerc.onnx.export(model, (x,), "model.onnx", opset=17,
                       input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})

The model (a Module, a function, an `eagerc.compile`d module, or an already exported
`eagerc.compiler.export.Program` / loaded `eagerc.runtime` program) is traced to an eagerc
graph by `eagerc.compiler.export.export`, then each graph node becomes one or a few ONNX
nodes (see `supported_ops()`); weights become initializers. The `onnx` package is needed
only here, and imported only when `export` runs.
"""
from ._convert import OnnxExportError, UnsupportedOpError, supported_ops
from ._export import export

__all__ = ["export", "supported_ops", "OnnxExportError", "UnsupportedOpError"]
