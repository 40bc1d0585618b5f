"""NVRTC through ctypes: CUDA C source -> PTX, without a GPU or a driver.

    ptx = compile_ptx(source)                    # arch $EAGERC_NVRTC_ARCH or compute_90
    ptx = compile_ptx(source, arch="compute_80", options=("-lineinfo",))

The library is $EAGERC_NVRTC (a path), else the `nvidia-cuda-nvrtc-cu12` wheel's
`nvidia/cuda_nvrtc/lib/libnvrtc.so.12` on sys.path, else the system's (`libnvrtc.so.12`,
`libnvrtc.so`, CUDA_HOME/lib64). `available()` says whether one loads; `NvrtcNotFound`
is raised otherwise, `NvrtcError` (with the compiler log) when a program does not
compile. Runtime layer: ctypes and the standard library only.
"""
import ctypes
import ctypes.util
import os
import sys
import threading

__all__ = ["available", "version", "compile_ptx", "NvrtcError", "NvrtcNotFound",
           "DEFAULT_ARCH"]

DEFAULT_ARCH = "compute_90"
_lock = threading.Lock()
_lib = None
_error = None


class NvrtcNotFound(RuntimeError):
    pass


class NvrtcError(RuntimeError):
    def __init__(self, message, log=""):
        super().__init__(message + (f"\n{log}" if log else ""))
        self.log = log


def _candidates():
    env = os.environ.get("EAGERC_NVRTC")
    if env:
        yield env
        return
    for base in sys.path:
        if base and os.path.isdir(base):
            for name in ("libnvrtc.so.12", "libnvrtc.so.13"):
                p = os.path.join(base, "nvidia", "cuda_nvrtc", "lib", name)
                if os.path.exists(p):
                    yield p
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            for sub in ("lib64", "lib"):
                p = os.path.join(home, sub, "libnvrtc.so")
                if os.path.exists(p):
                    yield p
    found = ctypes.util.find_library("nvrtc")
    if found:
        yield found
    yield "libnvrtc.so.12"
    yield "libnvrtc.so"


def _load():
    global _lib, _error
    with _lock:
        if _lib is not None or _error is not None:
            return _lib
        tried = []
        for p in _candidates():
            try:
                lib = ctypes.CDLL(p)
                lib.nvrtcCreateProgram   # noqa: B018 -- raises AttributeError if not NVRTC
            except (OSError, AttributeError) as e:
                tried.append(f"{p}: {e}")
                continue
            _declare(lib)
            _lib = lib
            return lib
        _error = ("NVRTC not found (pip install nvidia-cuda-nvrtc-cu12, or set $EAGERC_NVRTC to "
                  "libnvrtc.so); tried: " + "; ".join(tried))
        return None


def _declare(lib):
    P, c = ctypes.c_void_p, ctypes
    lib.nvrtcGetErrorString.restype = c.c_char_p
    lib.nvrtcGetErrorString.argtypes = [c.c_int]
    lib.nvrtcVersion.argtypes = [c.POINTER(c.c_int), c.POINTER(c.c_int)]
    lib.nvrtcCreateProgram.argtypes = [c.POINTER(P), c.c_char_p, c.c_char_p, c.c_int,
                                       c.POINTER(c.c_char_p), c.POINTER(c.c_char_p)]
    lib.nvrtcCompileProgram.argtypes = [P, c.c_int, c.POINTER(c.c_char_p)]
    lib.nvrtcGetProgramLogSize.argtypes = [P, c.POINTER(c.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [P, c.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [P, c.POINTER(c.c_size_t)]
    lib.nvrtcGetPTX.argtypes = [P, c.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [c.POINTER(P)]
    for f in ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize",
              "nvrtcGetProgramLog", "nvrtcGetPTXSize", "nvrtcGetPTX", "nvrtcDestroyProgram"):
        getattr(lib, f).restype = c.c_int


def available():
    return _load() is not None


def _lib_or_raise():
    lib = _load()
    if lib is None:
        raise NvrtcNotFound(_error)
    return lib


def version():
    """(major, minor) of the loaded NVRTC."""
    lib = _lib_or_raise()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(lib, rc, what):
    if rc != 0:
        raise NvrtcError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode()} ({rc})")


def compile_ptx(source, name="eagerc_kernels.cu", arch=None, options=()):
    """PTX text of `source` for virtual architecture `arch` (e.g. "compute_90"); raises
    NvrtcError with NVRTC's log when it does not compile."""
    lib = _lib_or_raise()
    arch = arch or os.environ.get("EAGERC_NVRTC_ARCH") or DEFAULT_ARCH
    opts = [f"--gpu-architecture={arch}", *options]
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode(errors="replace").strip()
        if rc != 0:
            raise NvrtcError(f"NVRTC could not compile {name} ({arch}): "
                             f"{lib.nvrtcGetErrorString(rc).decode()}", log)
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        return buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
