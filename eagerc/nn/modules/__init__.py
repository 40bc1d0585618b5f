"""Every layer of eagerc.nn (re-exported by eagerc/nn/__init__.py)."""
from .module import Module, RemovableHandle, register_module_forward_pre_hook, register_module_forward_hook  # noqa
from .container import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .flatten import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .pixelshuffle import *  # noqa: F401,F403
from .fold import *  # noqa: F401,F403
