"""The compiler: tracer, guards and cache (@compile), passes, backends, export."""
from .compile import compile, explain, CompiledFunction, GraphBreak  # noqa: F401
from .tracer import trace  # noqa: F401
from ..runtime.ir import Graph, Node, Value  # noqa: F401
from ..runtime.verify import verify, GraphError  # noqa: F401
