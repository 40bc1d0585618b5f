"""The memory-planning pass: graph.memory_plan made by the runtime's planner (runtime/memplan.py,
shared with a loaded program's bound kernels), fed each backend's predicate `writes`.
`peak_bytes(graph)` / `peak_bytes(graph, plan=True)` measure the peak without / with a plan.
"""
from ...runtime.memplan import BUFFER, FRESH, NONE, OUT, alias_ends, check_memory_plan, memory_plan, returned
from .util import peak_bytes

__all__ = ["memplan", "peak_bytes", "check_memory_plan", "alias_ends", "returned",
           "OUT", "BUFFER", "FRESH", "NONE"]


def memplan(graph, writes=None, buffers=True, units=None, takes=None, ends=None):
    """`graph` with its MemoryPlan (runtime/memplan.memory_plan: `writes` is the backend's
    predicate, default OUT for every node; buffers=False plans in place only)."""
    return graph.copy(memory_plan=memory_plan(graph, writes, buffers, units, takes, ends))
