"""Neural-network building blocks, PyTorch's `torch.nn` names and semantics.

`Parameter`, `Module` and the layers (`Linear`, `Conv2d`, `Embedding`, `LayerNorm`,
`RMSNorm`, `Dropout`, `Sequential`, `ModuleList`, `ModuleDict`, activations, `Flatten`,
pools, losses); `nn.functional` (the ops the layers call) and `nn.init` (initialisers).
Layers are float64 unless given `dtype=`, and draw their initial values from
`generator=` or the default generator that `pa.manual_seed` reseeds.
"""
from . import functional, graph, init  # noqa: F401  (graph: the rules' differentiable forms)
from .module import IncompatibleKeys, Module, RemovableHandle
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Parameter

__all__ = ["IncompatibleKeys", "Module", "Parameter", "RemovableHandle", "functional",
           "init"] + list(_modules_all)
