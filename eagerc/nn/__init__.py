"""eagerc.nn: Modules, Parameter, containers, layers, losses, `functional`, `init` and `utils`."""
from .. import ops  # noqa: F401  (every op family first: `import eagerc.nn` may come before `eagerc.<x>`)
from .parameter import Parameter, Buffer  # noqa: F401
from .._missing import module_getattr as _module_getattr
from .modules import *  # noqa: F401,F403
from .modules import Module, RemovableHandle  # noqa: F401
from . import functional, init, modules  # noqa: F401
from . import utils  # noqa: F401,E402
from . import parallel  # noqa: F401,E402


__getattr__ = _module_getattr("eagerc.nn", "torch.nn")
