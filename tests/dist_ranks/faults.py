"""Run by tests/test_distributed.py under `mpiexec -n 2`: one fault, named by argv[1].
    raise    rank 1 raises before a collective rank 0 waits in (with a long timeout)
    timeout  rank 1 sleeps past rank 0's short timeout
    ddp      rank 1 stops before backward, so rank 0's gradient all-reduce times out"""
import datetime
import sys
import time

import eagerc
import eagerc.distributed as dist
import eagerc.nn as nn

case = sys.argv[1]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60 if case == "raise" else 1))
r = dist.get_rank()
if case == "raise":
    if r == 1:
        raise ValueError("boom on rank 1")
    dist.all_reduce(eagerc.zeros(2))
elif case == "timeout":
    if r == 1:
        time.sleep(30)
    dist.all_reduce(eagerc.zeros(2))
elif case == "ddp":
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 3))
    loss = ddp(eagerc.ones(1, 3)).sum()
    if r == 1:
        time.sleep(30)
    loss.backward()
print("not reached", r)
