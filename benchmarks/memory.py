"""Memory of a training step: peak RSS, page faults and system time per step (issue 15 section 6).

    python benchmarks/memory.py [--steps 20]

Each case runs in a fresh process (peak RSS is a per-process high-water mark): the GPT block
stack of train_step.py (2 layers x 128, batch 8, sequence 64) eager, compiled on backends
numpy and c, and PyTorch eager when installed; the CNN step at batch 64 eager. Eager runs
twice: as users get it (runtime/memory.py raises glibc's mmap/trim thresholds at import) and
with EAGERC_MALLOC_TUNING=0 (glibc's defaults: big freed arrays go back to the OS and come
back as fresh zeroed pages every step). Faults and system time are per step, over --steps
steps after 3 warm-up steps; peak RSS is the whole process's, imports included (PyTorch's
own libraries make its baseline larger).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {here!r}); sys.path.insert(0, os.path.dirname({here!r}))
import numpy as np
lib_name, model_name, backend, steps = {args!r}
if lib_name == "torch":
    import torch as lib
    torch = lib
    torch.set_num_threads(1)
else:
    import eagerc as lib
from train_step import gpt, cnn
from compiled_train_step import training_step
rng = np.random.default_rng(0)
lib.manual_seed(0)
if model_name == "gpt":
    model = gpt(lib)
    x = lib.from_numpy(rng.integers(0, 256, (8, 64)))
    y = lib.from_numpy(rng.integers(0, 256, (8, 64)))
else:
    model = cnn(lib)
    x = lib.from_numpy(rng.standard_normal((64, 1, 28, 28)).astype(np.float32))
    y = lib.from_numpy(rng.integers(0, 10, (64,)))
step = training_step(lib, model)
if backend != "eager":
    step = lib.compile(step, backend=backend)
for _ in range(3):
    step(x, y)
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
for _ in range(steps):
    step(x, y)
wall = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]   # (this image's own peak:
peak = int(hwm[0].split()[1]) / 1024 if hwm else r1.ru_maxrss / 1024     #  ru_maxrss keeps the parent's at exec)
print(json.dumps({{"peak_mib": peak, "faults": (r1.ru_minflt - r0.ru_minflt) / steps,
                   "sys_ms": (r1.ru_stime - r0.ru_stime) * 1000 / steps, "step_ms": wall * 1000 / steps}}))
"""


def run(lib, model, backend, steps, tuning=True):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if not tuning:
        env["EAGERC_MALLOC_TUNING"] = "0"
    code = CHILD.format(here=HERE, args=(lib, model, backend, steps))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1][:120]
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    cases = [("eagerc eager", "eagerc", "gpt", "eager", True),
             ("eagerc eager, glibc defaults", "eagerc", "gpt", "eager", False),
             ("eagerc compiled numpy", "eagerc", "gpt", "numpy", True),
             ("eagerc compiled c", "eagerc", "gpt", "c", True)]
    if have_torch:
        cases.append(("PyTorch eager", "torch", "gpt", "eager", True))
    cases += [("CNN b=64 eagerc eager", "eagerc", "cnn", "eager", True),
              ("CNN b=64 eagerc eager, glibc defaults", "eagerc", "cnn", "eager", False)]
    if have_torch:
        cases.append(("CNN b=64 PyTorch eager", "torch", "cnn", "eager", True))
    print(f"GPT training step (2 layers x 128, batch 8 x 64) unless named; one thread; {args.steps} steps each")
    print(f"  {'case':<40} {'peak RSS':>10} {'faults/step':>12} {'sys/step':>10} {'step':>9}")
    for what, lib, model, backend, tuning in cases:
        r, err = run(lib, model, backend, args.steps, tuning)
        if r is None:
            print(f"  {what:<40} failed: {err}")
            continue
        print(f"  {what:<40} {r['peak_mib']:7.0f} MiB {r['faults']:12.0f} {r['sys_ms']:7.2f} ms "
              f"{r['step_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
