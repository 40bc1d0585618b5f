#!/usr/bin/env bash
# tools/gpu_check.sh -- the GPU checks of issue 5, in one run (< 5 minutes).
#
# On a machine with an NVIDIA GPU and python, numpy, cupy (cupy-cuda12x/13x) installed
# (torch optional; no network needed), from anywhere in the checkout:
#
#     bash tools/gpu_check.sh            # PYTHON=python3.12 bash tools/gpu_check.sh
#
# 1. environment: python, numpy, cupy, the device (name, memory, theoretical bandwidth);
# 2. the GPU-marked tests: python -m pytest -q -m cuda (backend "cuda" vs eager on cupy);
# 3. benchmarks: a fused elementwise kernel (tanh-GELU, backend "cuda") in GB/s against the
#    device's peak and a device-to-device copy; eager vs compiled cupy for a small GPT
#    block training step;
# 4. a summary table. Exit status: 0 when every step passed, 1 otherwise.
set -u
cd "$(dirname "$0")/.." || { echo "gpu_check: cannot cd to the checkout" >&2; exit 2; }
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/eagerc-gpu-check.XXXXXX")"
export EAGERC_CACHE_DIR="$LOG_DIR/kernels"
export EAGERC_GPU_BENCH_JSON="$LOG_DIR/bench.json"
declare -a ROWS=()
FAILED=0

row() {  # row STEP STATUS DETAIL
    ROWS+=("$(printf '%-26s %-6s %s' "$1" "$2" "$3")")
}

run_step() {  # run_step SECONDS LOGNAME cmd...: timeout-bounded, output to the log and the screen
    local limit="$1" log="$LOG_DIR/$2.log"
    shift 2
    if command -v timeout >/dev/null 2>&1; then
        timeout "$limit" "$@" 2>&1 | tee "$log"
    else
        "$@" 2>&1 | tee "$log"
    fi
    return "${PIPESTATUS[0]}"
}

echo "== eagerc GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ)); logs in $LOG_DIR"

# ---------------------------------------------------------------- 1. environment
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "gpu_check: '$PY' not found; set PYTHON=/path/to/python" >&2
    exit 2
fi
if ! run_step 120 env "$PY" - <<'EOF'
import sys
import numpy
print("python", sys.version.split()[0], "| numpy", numpy.__version__)
try:
    import cupy
except Exception as e:
    sys.exit(f"gpu_check: cupy does not import ({e}); install cupy-cuda12x or cupy-cuda13x")
n = cupy.cuda.runtime.getDeviceCount()
if n < 1:
    sys.exit("gpu_check: cupy sees no CUDA device")
p = cupy.cuda.runtime.getDeviceProperties(0)
name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
print(f"cupy {cupy.__version__} | CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()} | "
      f"{n} device(s); device 0: {name}, {p['totalGlobalMem'] / 2**30:.0f} GiB, "
      f"compute capability {p['major']}.{p['minor']}")
import eagerc
print("eagerc.cuda.is_available():", eagerc.cuda.is_available())
if not eagerc.cuda.is_available():
    sys.exit("gpu_check: eagerc does not see the GPU")
try:
    import torch
    print("torch", torch.__version__, "| cuda:", torch.cuda.is_available())
except Exception:
    print("torch: not installed (optional)")
EOF
then
    echo "gpu_check: environment check failed; nothing else can run" >&2
    exit 2
fi
row "environment" "ok" "$(tail -n +2 "$LOG_DIR/env.log" | head -1 | cut -c1-70)"

# ---------------------------------------------------------------- 2. GPU-marked tests
run_step 150 tests "$PY" -m pytest -q -m cuda -p no:cacheprovider tests
rc=$?
summary="$(grep -E '(passed|failed|error|skipped|no tests ran)' "$LOG_DIR/tests.log" | tail -1)"
if [ "$rc" -eq 0 ]; then
    row "pytest -m cuda" "ok" "$summary"
else
    [ "$rc" -eq 124 ] && summary="timed out after 150 s"
    row "pytest -m cuda" "FAIL" "rc=$rc: $summary"
    FAILED=1
fi

# ---------------------------------------------------------------- 3. benchmarks
run_step 120 bench "$PY" - <<'EOF'
import json
import os
import sys
import time

import cupy as cp
import numpy as np

sys.path.insert(0, "benchmarks")
import eagerc
import eagerc.compiler.backends.cuda_backend  # noqa: F401  (registers "cuda")

results = {}


def gpu_time(fn, iters=20):
    """Median milliseconds of fn() on the device (CUDA events), after two warm-up calls."""
    fn(); fn()
    cp.cuda.Stream.null.synchronize()
    times = []
    for _ in range(iters):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def peak_gbs():
    """Theoretical DRAM bandwidth: 2 (DDR) x memory clock x bus width."""
    rt = cp.cuda.runtime
    try:
        clock_khz = rt.deviceGetAttribute(36, 0)      # cudaDevAttrMemoryClockRate
        width = rt.deviceGetAttribute(37, 0)          # cudaDevAttrGlobalMemoryBusWidth
    except Exception:
        p = rt.getDeviceProperties(0)
        clock_khz, width = p.get("memoryClockRate", 0), p.get("memoryBusWidth", 0)
    return 2 * clock_khz * 1e3 * width / 8 / 1e9 if clock_khz and width else None


try:
    peak = peak_gbs()
    n = 1 << 26                                       # 64M float32 = 256 MiB per array
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.empty_like(x)
    copy_ms = gpu_time(lambda: cp.copyto(y, x))
    copy_gbs = 2 * n * 4 / copy_ms / 1e6

    def gelu(t):
        return 0.5 * t * (1 + eagerc.tanh(0.7978845608 * (t + 0.044715 * t ** 3)))
    f = eagerc.compile(gelu, backend="cuda")
    xt = eagerc.tensor(cp.asnumpy(x)).cuda()
    x = xt.data
    with eagerc.no_grad():
        got = f(xt)
        prog = [e.program for e in f.entries.values() if getattr(e, "program", None) is not None]
        nk = sum(len(getattr(p, "kernels", [])) for p in prog)
        fused_ms = gpu_time(lambda: f(xt))
        eager_ms = gpu_time(lambda: gelu(xt), iters=5)
        want = gelu(xt)
    err = float(cp.max(cp.abs(got.data - want.data)))
    fused_gbs = 2 * n * 4 / fused_ms / 1e6
    results["gelu"] = dict(kernels=nk, fused_ms=fused_ms, eager_ms=eager_ms, gbs=fused_gbs,
                           copy_gbs=copy_gbs, peak=peak, max_err=err)
    print(f"tanh-GELU 64M f32: {nk} kernel(s), {fused_ms:.3f} ms = {fused_gbs:.0f} GB/s "
          f"(copy {copy_gbs:.0f} GB/s, peak {peak or float('nan'):.0f} GB/s); eager cupy {eager_ms:.3f} ms; "
          f"max |diff| {err:.2e}")
except Exception as e:
    results["gelu"] = dict(error=f"{type(e).__name__}: {e}")
    print("GELU benchmark failed:", repr(e))

try:
    from train_step import gpt, make_step
    eagerc.manual_seed(0)
    rng = np.random.default_rng(0)
    B, T = 8, 64

    def build():
        eagerc.manual_seed(0)
        model = gpt(eagerc).cuda()
        idx = eagerc.tensor(rng.integers(0, 256, (B, T))).cuda()
        return make_step(eagerc, model, idx, idx)
    eager_step = build()
    eager_ms = gpu_time(eager_step, iters=10)
    comp_step = eagerc.compile(build(), backend="cuda")
    t0 = time.perf_counter()
    comp_step()
    cp.cuda.Stream.null.synchronize()
    compile_s = time.perf_counter() - t0
    comp_ms = gpu_time(comp_step, iters=10)
    results["gpt"] = dict(eager_ms=eager_ms, compiled_ms=comp_ms, speedup=eager_ms / comp_ms,
                          compile_s=compile_s)
    print(f"GPT block step (2 layers, d128, B{B} T{T}): eager {eager_ms:.2f} ms, compiled {comp_ms:.2f} ms "
          f"({eager_ms / comp_ms:.2f}x), first call {compile_s:.1f} s")
except Exception as e:
    results["gpt"] = dict(error=f"{type(e).__name__}: {e}")
    print("GPT step benchmark failed:", repr(e))

with open(os.environ["EAGERC_GPU_BENCH_JSON"], "w") as fh:
    json.dump(results, fh)
EOF
rc=$?
BENCH="$EAGERC_GPU_BENCH_JSON"
if [ "$rc" -ne 0 ] || [ ! -s "$BENCH" ]; then
    row "benchmarks" "FAIL" "rc=$rc (see $LOG_DIR/bench.log)"
    FAILED=1
else
    while IFS= read -r line; do
        ROWS+=("$line")
    done < <("$PY" - "$BENCH" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
def line(step, ok, detail):
    print(f"{step:<26} {ok:<6} {detail}")
g = r.get("gelu", {})
if "error" in g:
    line("fused GELU bandwidth", "FAIL", g["error"][:90])
else:
    ref = g["peak"] or g["copy_gbs"]
    frac = g["gbs"] / ref
    line("fused GELU bandwidth", "ok" if frac >= 0.8 else "SLOW",
         f"{g['gbs']:.0f} GB/s = {100 * frac:.0f}% of {'peak' if g['peak'] else 'copy'} {ref:.0f} GB/s "
         f"(copy {g['copy_gbs']:.0f}); {g['kernels']} kernel; eager {g['eager_ms'] / g['fused_ms']:.1f}x slower; "
         f"err {g['max_err']:.1e}")
p = r.get("gpt", {})
if "error" in p:
    line("GPT step compiled/eager", "FAIL", p["error"][:90])
else:
    line("GPT step compiled/eager", "ok" if p["speedup"] >= 1.5 else "SLOW",
         f"eager {p['eager_ms']:.2f} ms, compiled {p['compiled_ms']:.2f} ms = {p['speedup']:.2f}x "
         f"(target 1.5x); compile {p['compile_s']:.1f} s")
EOF
)
    grep -q "FAIL" <(printf '%s\n' "${ROWS[@]}") && FAILED=1
fi

# ---------------------------------------------------------------- 4. summary
echo
echo "== summary"
printf '%-26s %-6s %s\n' "step" "status" "detail"
printf '%s\n' "${ROWS[@]}"
echo "logs: $LOG_DIR"
exit "$FAILED"
