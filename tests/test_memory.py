"""runtime/memory.py: big freed arrays are reused by the next step instead of re-faulted.

Counted with the kernel's own page-fault counter (getrusage) in fresh processes, against the
same loop with the tuning off: the reference is the OS's behaviour, not eagerc's claim.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning is Linux-only")

_LOOP = """
import json, resource, numpy as np, eagerc
from eagerc.runtime import memory
x = eagerc.ones(2048, 1024)            # 8 MiB float32 arrays: above glibc's default mmap threshold
def step():                            # a step's activations: several alive at once, freed together
    acts = [x * float(i) for i in range(6)]
    return sum(a.sum() for a in acts)
for _ in range(3):
    step()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"tuned": memory.tuned, "faults": r1 - r0}))
"""


def _run(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                                            "GLIBC_TUNABLES", "LD_PRELOAD", "EAGERC_MALLOC_TUNING")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _LOOP], env=full, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_large_arrays_are_reused_not_refaulted():
    tuned, off = _run(), _run(EAGERC_MALLOC_TUNING="0")
    assert tuned["tuned"] and not off["tuned"]
    assert off["faults"] >= 20, off          # the OS hands fresh pages to every step without tuning
    assert tuned["faults"] <= off["faults"] / 10, (tuned, off)


def test_a_users_own_malloc_settings_win():
    r = _run(MALLOC_MMAP_THRESHOLD_=str(128 * 1024))
    assert not r["tuned"]
    assert r["faults"] >= 20, r              # their threshold still maps (and faults) every 8 MiB array
