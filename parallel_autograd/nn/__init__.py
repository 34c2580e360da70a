"""Neural-network building blocks, PyTorch's `torch.nn` names and semantics.

`Parameter`, `Module` and the layers: `Linear`, `Conv1d/2d/3d`, `ConvTranspose1d/2d/3d`,
pools (max, avg, adaptive), `Upsample`, `PixelShuffle`, `Fold`/`Unfold`, `Embedding`,
`LayerNorm`, `RMSNorm`, `BatchNorm1d/2d/3d`, `GroupNorm`, `InstanceNorm1d/2d/3d`,
`LocalResponseNorm`, `Dropout`, the activations, `MultiheadAttention`, `RNN`/`LSTM`/`GRU`,
the losses, `Sequential`, `ModuleList`, `ModuleDict`, `Flatten`; `nn.functional` (the ops
the layers call) and `nn.init` (initialisers). Layers take the default dtype
(`pa.get_default_dtype()`: float32 unless changed, as PyTorch's) unless given `dtype=`, and
draw their initial values from `generator=` or the default generator that `pa.manual_seed`
reseeds.
"""
from . import functional, init  # noqa: F401
from . import parallel  # noqa: F401  (DistributedDataParallel)
from . import utils  # noqa: F401  (clip_grad_norm_, ...)
from .module import IncompatibleKeys, Module, RemovableHandle
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Parameter

__all__ = ["IncompatibleKeys", "Module", "Parameter", "RemovableHandle", "functional",
           "init", "parallel", "utils"] + list(_modules_all)
