"""torch.backends.mkl: whether numpy's BLAS is Intel MKL (eagerc's matmuls use numpy's BLAS)."""


def is_available():
    try:
        import numpy as np
        cfg = np.show_config(mode="dicts") if "mode" in np.show_config.__code__.co_varnames else {}
        blas = str(cfg.get("Build Dependencies", {}).get("blas", {}).get("name", ""))
        return "mkl" in blas.lower()
    except Exception:
        return False
