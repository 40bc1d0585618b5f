"""Exported programs: `eagerc.runtime.load(...)` per call against onnxruntime and eager mode.

    python benchmarks/export_runtime.py [--repeat 9] [--profile]

The demo models, each exported once with `eagerc.export` (run by the runtime) and with
`eagerc.onnx.export` (run by onnxruntime, one intra-op thread, all graph optimisations):
char-GPT (examples/char_gpt.py, 2 layers x 64, 4 heads, batch 4 x 32 tokens: issue 15's model),
the digits CNN (examples/train_digits.py, batch 64) and the transformer classifier
(examples/transformer_classifier.py, batch 64 x 16). Columns: the runtime; the same file on
the executor without bound kernels (runtime/bind.py off: the runtime before issue 15); eager
mode under no_grad; onnxruntime (columns skipped when it, or onnx, is not installed).
Per-call thread CPU time, best of --repeat; one thread for BLAS, OpenMP, onnxruntime.
--profile: for char-GPT, the time per op (the executor's observer) and cProfile's top
functions of the per-call loop, bound and unbound.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
import eagerc.runtime  # noqa: E402
from eagerc.runtime import executor  # noqa: E402
from _harness import fmt, ratio, table  # noqa: E402


def per_call_us(fn, repeat, budget_s=0.05):
    """Best per-call thread CPU time (us): every engine here runs on the calling thread."""
    t = time.thread_time()
    fn()
    number = max(3, int(budget_s / max(time.thread_time() - t, 1e-6)))
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        for _ in range(number):
            fn()
        best = min(best, (time.thread_time() - t) / number)
    return best * 1e6


def models():
    """(name, module, example numpy inputs)."""
    from examples.char_gpt import GPT
    from examples.train_digits import make_model
    from examples import transformer_classifier as tc
    rng = np.random.default_rng(0)
    eagerc.manual_seed(0)
    gpt = GPT(vocab_size=96, block_size=64, n_layer=2, n_embd=64, n_head=4)
    tokens = rng.integers(1, tc.VOCAB, (64, 16))
    return [("char-GPT 2x64, 4x32 tokens", gpt, (rng.integers(0, 96, (4, 32)),)),
            ("digits CNN, batch 64", make_model(), (rng.random((64, 1, 8, 8), dtype=np.float32),)),
            ("transformer classifier, 64x16", tc.Classifier(), (tokens, tokens == tc.PAD))]


def onnx_session(module, inputs, path):
    """An onnxruntime session of `module` exported by eagerc.onnx.export, or None without it."""
    try:
        import onnxruntime as ort
        import onnx  # noqa: F401  (eagerc.onnx.export needs it)
    except ImportError:
        return None
    eagerc.onnx.export(module, tuple(eagerc.tensor(a) for a in inputs), path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    feed = dict(zip(names, inputs))
    return lambda: s.run(None, feed)


def unbound(run, inputs):
    """The loaded program's graph on the executor without bound kernels (as before issue 15)."""
    plan = executor.Plan(run.graph, np, check=True, where=run.path)
    env = dict(run.weights, **{n: a for (n, _, _, _), a in zip(run._specs, inputs)})
    return lambda: plan(dict(env))


def profile(run, inputs, label):
    """Where one call's time goes: per op (observer) and cProfile's top functions."""
    per_op, clock = {}, time.thread_time_ns

    def observe(node, kernel, args, attrs):
        t = clock()
        r = kernel(*args, **attrs)
        per_op[node.op] = per_op.get(node.op, 0) + clock() - t
        return r
    n = 500
    previous = executor.set_observer(observe)
    try:
        for _ in range(n):
            run()
    finally:
        executor.set_observer(previous)
    total = sum(per_op.values()) / n / 1e3
    print(f"\n{label}: kernels {total:.0f} us per call, by op (observer timings):")
    print("  " + ", ".join(f"{op} {t / n / 1e3:.1f}" for op, t in sorted(per_op.items(), key=lambda kv: -kv[1])))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        run()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
    print(f"  Python calls per call: {stats.total_calls / n:.0f}")
    stats.print_stats(8)
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:] if line.strip()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    rows, tmp = [], tempfile.mkdtemp()
    for i, (name, module, inputs) in enumerate(models()):
        module.eval()
        path = os.path.join(tmp, f"m{i}")
        eagerc.export(module, tuple(eagerc.tensor(a) for a in inputs)).save(path + ".eagerc")
        run = eagerc.runtime.load(path + ".eagerc")
        call = lambda run=run, inputs=inputs: run(*inputs)  # noqa: E731
        ort = onnx_session(module, inputs, path + ".onnx")
        tensors = [eagerc.tensor(a) for a in inputs]

        def eager(module=module, tensors=tensors):
            with eagerc.no_grad():
                module(*tensors)
        ref = run(*inputs)
        if ort is not None:
            np.testing.assert_allclose(ort()[0], ref, rtol=1e-4, atol=1e-4)
        old = unbound(run, inputs)
        t_run, t_old = per_call_us(call, args.repeat), per_call_us(old, args.repeat)
        t_eager = per_call_us(eager, args.repeat)
        t_ort = per_call_us(ort, args.repeat) if ort is not None else None
        rows.append([name, fmt(t_run), fmt(t_old), fmt(t_eager), fmt(t_ort), ratio(t_run, t_ort),
                     ratio(t_run, t_old)])
        if args.profile and i == 0:
            profile(call, inputs, "char-GPT, runtime (bound)")
            profile(old, inputs, "char-GPT, executor without bound kernels")
    print(table(rows, ["model", "runtime", "unbound", "eager", "onnxruntime", "runtime/ort", "runtime/unbound"]))


if __name__ == "__main__":
    main()
