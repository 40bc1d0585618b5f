"""TensorBoard logging, as torch.utils.tensorboard: `from eagerc.utils.tensorboard import SummaryWriter`.

The event files are written by the `tensorboard` package's own writer (EventFileWriter) from its
own protobufs, so TensorBoard reads them as it reads PyTorch's; eagerc only turns its tensors into
those messages. The package is an extra (`pip install eagerc[tensorboard]`): importing this module
without it is a ModuleNotFoundError that says so, as PyTorch's does; `import eagerc` never needs it.
"""
try:
    import tensorboard  # noqa: F401
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "eagerc.utils.tensorboard writes TensorBoard event files with the `tensorboard` package, which is "
        "not installed: pip install eagerc[tensorboard]  (or: pip install tensorboard)",
        name="tensorboard") from None

from .writer import SummaryWriter  # noqa: E402

__all__ = ["SummaryWriter"]
