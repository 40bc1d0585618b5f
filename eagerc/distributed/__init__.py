"""eagerc.distributed: PyTorch's torch.distributed on existing engines -- MPI (mpi4py) on
CPUs, NCCL (cupy) on GPUs. See docs/distributed.md.

    group.py        process groups, ranks, timeouts, arrivals, ending the job on an exception
    engines.py      the MPI engine and a simulated one (tests, benchmarks); nccl.py: NCCL
    collectives.py  all_reduce, broadcast, all_gather, ... over Tensors; Work handles
    objects.py      broadcast_object_list / all_gather_object, as JSON (never pickle)
    run.py          the launcher: python -m eagerc.distributed.run --nproc-per-node N script.py
"""
from .group import (ProcessGroup, GroupMember, DistError, DistTimeoutError, init_process_group,  # noqa: F401
                    destroy_process_group, is_initialized, is_available, is_mpi_available, is_nccl_available,
                    is_gloo_available, get_rank, get_world_size, get_backend, new_group)
from .collectives import (ReduceOp, Work, all_reduce, broadcast, all_gather, all_gather_into_tensor,  # noqa: F401
                          reduce_scatter_tensor, reduce, gather, scatter, send, recv, isend, irecv, barrier)
from .objects import broadcast_object_list, all_gather_object  # noqa: F401

group = GroupMember  # torch.distributed.group.WORLD

__all__ = ["ProcessGroup", "GroupMember", "group", "DistError", "DistTimeoutError", "init_process_group",
           "destroy_process_group", "is_initialized", "is_available", "is_mpi_available", "is_nccl_available",
           "is_gloo_available", "get_rank", "get_world_size", "get_backend", "new_group", "ReduceOp", "Work",
           "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce",
           "gather", "scatter", "send", "recv", "isend", "irecv", "barrier", "broadcast_object_list",
           "all_gather_object"]
