"""The frontend's op families: PyTorch-named functions and Tensor methods, each op's derivative.

Importing the package loads every family, so every Tensor method exists: `eagerc.nn` imports
from here (never from `eagerc._api`, the public namespace built on top of both).
"""
from . import (creation, elementwise, indexing, inplace, joining, linalg, reduction, shape,  # noqa: F401
               tensor_methods, nn, conv, rnn)
