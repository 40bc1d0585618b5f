"""eagerc.linalg (torch.linalg): norm, vector_norm, matrix_norm, matmul, cross."""
from .ops.linalg import _linalg_norm as norm, vector_norm, matrix_norm, matmul, linalg_cross as cross  # noqa: F401

__all__ = ["norm", "vector_norm", "matrix_norm", "matmul", "cross"]
