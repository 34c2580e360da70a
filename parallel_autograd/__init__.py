"""parallel_autograd: reverse-mode autodiff on numpy with a parallel backward engine."""
from . import allocator, autograd, distributed, intraop, memory, nn, optim, utils  # noqa: F401
from .allocator import tune_allocator
from .checkpoint import checkpoint, checkpoint_sequential
from .anomaly import (detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                      set_detect_anomaly)
from .creation import arange, ones, randn, zeros
from .engine.sequential import backward, grad
from .engine.engine import (Engine, backward_parallel, default_engine, get_default_engine,
                            grad_parallel, set_default_engine)
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .ops import activations as _activations  # noqa: F401  (declares them: exported below)
from .ops.index import (chunk, diag_embed, diagonal, einsum, flip, gather, index_add,
                        index_select, masked_fill, masked_scatter, movedim, narrow, repeat,
                        roll, scatter, scatter_add, scatter_reduce, take_along_axis,
                        take_along_dim, tile, tril, triu, unbind)
from .ops.inplace_more import bernoulli
from .ops import logic as _logic  # noqa: F401  (declares them: exported below)
from . import linalg  # noqa: F401, I001  (pa.linalg: torch.linalg's ops)
from .ops import reduce as _reduce, scan as _scan  # noqa: F401  (their ops: exported below)
from .ops.shape import (broadcast_to, clone, concat, expand, flatten, getitem, pad, permute,
                        reshape, split, squeeze, stack, swapaxes, transpose, unsqueeze)
from .ops.views import (masked_select, repeat_interleave, select, sum_to_size, tensor_split,
                        unflatten)
from .primitive import exports as _exports
from .primitive import primitive, record
from .profiler import profile
from .random import default_generator, manual_seed
from .serialization import load, save
from .tensor import Tensor, tensor
from .testing import gradcheck, gradgradcheck
from . import methods as _methods  # noqa: F401, I001  (last: attaches Tensor's operators)

cat = concat

__version__ = "0.1.0"
_BUILTINS = {"abs", "all", "any", "max", "min", "pow", "round", "sum"}

# What `from parallel_autograd import *` brings in: the names below. Not the submodules
# (use pa.nn, pa.optim), and not the ops named like Python builtins (abs, max, min, pow,
# round, sum), which a star import would shadow silently: call them as pa.max(...) or as
# tensor methods (t.max()).
__all__ = [
    "chunk", "diag_embed", "diagonal", "einsum", "flip", "gather", "index_add", "index_select",
    "masked_fill", "masked_scatter", "movedim", "narrow", "repeat", "roll", "scatter",
    "scatter_add", "scatter_reduce", "take_along_axis", "take_along_dim", "tile", "tril", "triu",
    "unbind",
    "arange", "backward", "backward_parallel", "broadcast_to", "cat", "checkpoint",
    "checkpoint_sequential", "clone", "concat", "default_engine",
    "default_generator", "detect_anomaly", "enable_grad", "Engine", "expand",
    "flatten", "Function", "FunctionCtx", "get_default_engine", "getitem", "grad",
    "grad_parallel", "gradcheck", "gradgradcheck", "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled", "is_grad_enabled", "load", "manual_seed",
    "no_grad", "once_differentiable", "ones", "pad", "permute", "primitive", "profile",
    "randn", "record", "reshape", "save", "set_default_engine", "set_detect_anomaly",
    "set_grad_enabled", "split", "squeeze",
    "stack", "swapaxes", "Tensor", "tensor", "transpose", "tune_allocator",
    "unsqueeze", "zeros",
    # PyTorch's functions behind the Tensor methods of ops/views and inplace_more
    "bernoulli", "masked_select",
    "repeat_interleave", "select", "sum_to_size", "tensor_split", "unflatten",
]

# The declared ops (`primitive.defop`) of PyTorch's `torch` namespace: the registry exports
# them, and the star import takes those not named like Python builtins (abs, max, min, pow,
# round, sum, all, any), which it would shadow silently.
globals().update(_exports("torch"))
__all__ = sorted(set(__all__) | {n for n in _exports("torch") if n not in _BUILTINS})
