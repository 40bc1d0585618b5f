"""eagerc.linalg (torch.linalg): norm, vector_norm, matrix_norm, matmul."""
from .ops.linalg import _linalg_norm as norm, vector_norm, matrix_norm, matmul  # noqa: F401

__all__ = ["norm", "vector_norm", "matrix_norm", "matmul"]
