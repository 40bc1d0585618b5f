"""The interpreter backend: the graph run node by node by the runtime's executor (a Plan over
the numpy kernels); its `source` is the graph's printout."""
from ...runtime.executor import Plan


class InterpreterBackend:
    name = "interpreter"

    def compile(self, graph):
        return InterpretedProgram(graph)


class InterpretedProgram(Plan):
    """program(env, overrides=None) -> (outputs, mutations), leaving `env` as it is."""
    __slots__ = ("source",)

    def __init__(self, graph):
        super().__init__(graph)
        self.source = str(graph)

    def __call__(self, env, overrides=None):
        return Plan.__call__(self, dict(env), overrides)
