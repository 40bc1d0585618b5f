"""eagerc.nn: Modules, Parameter, containers, layers, losses, `functional`, `init` and `utils`."""
from .. import ops  # noqa: F401  (every op family first: `import eagerc.nn` may come before `eagerc.<x>`)
from .parameter import Parameter, Buffer  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module, RemovableHandle  # noqa: F401
from . import functional, init, modules  # noqa: F401
from . import utils  # noqa: F401,E402
from . import parallel  # noqa: F401,E402


def __getattr__(name):  # a missing name: PyTorch's and not implemented yet, or a typo?
    if name.startswith("__"):
        raise AttributeError(name)
    from .._missing import missing
    raise missing("eagerc.nn", "torch.nn", name)
