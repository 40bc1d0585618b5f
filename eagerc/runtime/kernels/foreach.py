"""Optimizer updates as one C call per param group ("foreach"): every parameter's flat buffer
updated by one generated loop, in the order of operations of the optimizer's rule.

Why: an eager Adam step is ~10 numpy ufunc calls per parameter (a GPT of 28 parameters: ~280
calls, 1.8 ms a step, most of it call overhead and passes over memory); one C loop per
parameter reads p, g, m, v once and writes them once, and one ctypes call covers the group.

What is computed: exactly the rule's arithmetic (eagerc/optim/rules.py: `adam`, `sgd`), each
operation rounded to the parameters' dtype as numpy's in-place ufuncs round it (kernel_cache
compiles with -ffp-contract=off: no fused multiply-add), and the scalars the rule passes are
rounded to that dtype first, as numpy rounds a Python float against a float32 array (NEP 50).
So the update is bit for bit the numpy rule's (tests/test_eager_kernels.py checks it).

    k = update_kernel("adam", "float32", ("decay", "amsgrad"))   # None: no compiler (numpy runs)
    k(arrays_per_param, scalars_per_param)

Variants are compile-time flags (one source, and one shared object, per rule, dtype and flag
set): a step pays for no branch it does not take.
"""
import ctypes

import numpy as np

from ...runtime import kernel_cache
from . import eager

__all__ = ["update_kernel", "RULES"]

_CT = {"float32": "float", "float64": "double"}


def _adam(flags):
    """rules.adam per element: p *= decay (AdamW); g = p wd + g (L2) or -g (maximize);
    m = m b1 + g keep1; v = v b2 + g g keep2; v = max(vmax, v) (amsgrad); p -= m / (sqrt(v) + c1) c2."""
    arrays = ("p", "g", "m", "v") + (("vmax",) if "amsgrad" in flags else ())
    scalars = ("decay", "wd", "b1", "keep1", "b2", "keep2", "c1", "c2")
    body = ["T pi = p[i];", "T gi = g[i];"]
    if "decay" in flags:
        body.append("pi = pi * decay;")
    body += _effective_grad(flags)
    body += ["T mi = m[i] * b1;", "T t = gi * keep1;", "mi = mi + t;", "m[i] = mi;",
             "T vi = v[i] * b2;", "t = gi * gi;", "t = t * keep2;", "vi = vi + t;", "v[i] = vi;"]
    if "amsgrad" in flags:   # numpy's maximum: a NaN in either operand is the result
        body += ["T vm = vmax[i];", "vi = (vm >= vi || vm != vm) ? vm : vi;", "vmax[i] = vi;"]
    body += ["t = SQRT(vi);", "t = t + c1;", "t = mi / t;", "t = t * c2;", "p[i] = pi - t;"]
    return arrays, scalars, body


def _sgd(flags):
    """rules.sgd per element, with a momentum buffer b that exists (the first step, which
    copies g into it, stays numpy): g = p wd + g or -g; b = b momentum + g keep (dampening)
    or + g; nesterov: p -= g lr, p -= b lr_momentum; else p -= b lr."""
    arrays = ("p", "g", "b")
    scalars = ("wd", "momentum", "keep", "lr", "lr_momentum")
    body = ["T pi = p[i];", "T gi = g[i];"] + _effective_grad(flags)
    body += ["T bi = b[i] * momentum;"]
    body += ["T t = gi * keep;", "bi = bi + t;"] if "dampening" in flags else ["bi = bi + gi;"]
    body += ["b[i] = bi;"]
    if "nesterov" in flags:
        body += ["T u = gi * lr;", "pi = pi - u;", "u = bi * lr_momentum;", "p[i] = pi - u;"]
    else:
        body += ["T u = bi * lr;", "p[i] = pi - u;"]
    return arrays, scalars, body


def _effective_grad(flags):
    """rules._effective_grad: t = p wd, then t + g (or t - g when maximizing); or -g."""
    if "wd" in flags:
        return ["T w = pi * wd;", "gi = w - gi;" if "maximize" in flags else "gi = w + gi;"]
    return ["gi = -gi;"] if "maximize" in flags else []


# rule -> (flags) -> (array names (read/written in place but g), scalar names, loop body)
RULES = {"adam": _adam, "sgd": _sgd}


def source(rule, dtype, flags):
    arrays, scalars, body = RULES[rule](flags)
    name = "_".join(["foreach", rule, dtype] + sorted(flags))
    ct = _CT[dtype]
    decl = [f"T *restrict {a} = (T *)arrays[{len(arrays)} * j + {i}];" for i, a in enumerate(arrays)]
    decl += [f"const T {s} = scalars[{len(scalars)} * j + {i}];" for i, s in enumerate(scalars)]
    lines = "\n".join("            " + b for b in body)
    src = (f"#include <stdint.h>\n#include <math.h>\n#define T {ct}\n"
           f"#define SQRT {'sqrtf' if dtype == 'float32' else 'sqrt'}\n"
           f"void {name}(int64_t n, void **arrays, const int64_t *sizes, const T *scalars)\n{{\n"
           f"    for (int64_t j = 0; j < n; j++) {{\n"
           + "".join(f"        {d}\n" for d in decl) +
           f"        const int64_t size = sizes[j];\n"
           f"        #pragma omp simd\n"
           f"        for (int64_t i = 0; i < size; i++) {{\n{lines}\n        }}\n    }}\n}}\n")
    return name, src, len(arrays), len(scalars)


class UpdateKernel:
    """One compiled update: `kernel(arrays, scalars)` with, per parameter, its C-contiguous
    arrays in the rule's order and its scalars (Python floats, rounded to the dtype here)."""
    __slots__ = ("fn", "dtype", "n_arrays", "n_scalars")

    def __init__(self, fn, dtype, n_arrays, n_scalars):
        self.fn, self.dtype, self.n_arrays, self.n_scalars = fn, np.dtype(dtype), n_arrays, n_scalars
        fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = None

    def __call__(self, arrays, scalars):
        ptr = kernel_cache.ptr
        n = len(arrays)
        pointers = np.array([ptr(a) for group in arrays for a in group], dtype=np.uint64)
        sizes = np.array([group[0].size for group in arrays], dtype=np.int64)
        values = np.array(scalars, dtype=np.float64).astype(self.dtype)   # Python floats, rounded once
        self.fn(n, pointers.ctypes.data, sizes.ctypes.data, values.ctypes.data)


_kernels = {}


def update_kernel(rule, dtype, flags):
    """The compiled foreach update of `rule` for `dtype` and this flag set (a frozenset of
    names), built on first use; None when the C kernels are off or no compiler works."""
    if not eager.enabled():
        return None
    key = (rule, dtype, flags)
    k = _kernels.get(key, False)
    if k is False:
        name, src, n_arrays, n_scalars = source(rule, dtype, flags)
        fn = eager.c_function(name, src)
        k = None if fn is None else UpdateKernel(fn, dtype, n_arrays, n_scalars)
        if k is not None or eager.building():
            _kernels[key] = k
    return k
