"""The memory-planning pass: graph.memory_plan from the runtime's planner (runtime/memplan.py).

The planner -- lifetimes through views, in-place hand-overs, mutation chains, buffers
assigned greedily by size, and the check that a plan is safe -- lives in the runtime, so
a loaded program's bound kernels (runtime/bind.py) plan their buffers with the same code.
What is the compiler's is here: the pass each backend's pipeline names, fed by the
backend's predicate (`writes`: OUT, BUFFER, FRESH or NONE, as runtime/memplan.py says).
`peak_bytes(graph)` / `peak_bytes(graph, plan=True)` measure the peak without / with a plan.
"""
from ...runtime.memplan import BUFFER, FRESH, NONE, OUT, SEARCH, alias_ends, check_memory_plan, memory_plan, returned
from .util import peak_bytes

__all__ = ["memplan", "peak_bytes", "check_memory_plan", "alias_ends", "returned", "SEARCH",
           "OUT", "BUFFER", "FRESH", "NONE"]


def memplan(graph, writes=None, buffers=True, units=None, takes=None):
    """`graph` with its MemoryPlan (runtime/memplan.memory_plan: `writes` is the backend's
    predicate, default OUT for every node; buffers=False plans in place only)."""
    return graph.copy(memory_plan=memory_plan(graph, writes, buffers, units, takes))
