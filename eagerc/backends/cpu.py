"""torch.backends.cpu: the CPU's vector capability, as PyTorch reports it."""


def get_cpu_capability():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "DEFAULT"
    if " avx512f" in flags:
        return "AVX512"
    if " avx2" in flags:
        return "AVX2"
    return "DEFAULT"
