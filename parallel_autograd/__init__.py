"""parallel_autograd: reverse-mode autodiff on numpy with a parallel backward engine."""
from . import allocator, nn  # noqa: F401
from .allocator import tune_allocator
from .creation import arange, ones, randn, zeros
from .engine.sequential import backward, grad
from .engine.engine import (Engine, backward_parallel, default_engine, get_default_engine,
                            grad_parallel, set_default_engine)
from .function import Function, FunctionCtx
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .ops.elementwise import (abs, add, clip, cos, div, exp, gelu, leaky_relu, log, maximum,
                              minimum, mul, neg, pow, relu, sigmoid, silu, sin, sqrt, sub,
                              tanh, where)
from .ops.linalg import matmul
from .ops.reduce import log_softmax, logsumexp, max, mean, min, softmax, sum, var
from .ops.shape import (broadcast_to, concat, expand, flatten, getitem, pad, permute, reshape,
                        split, squeeze, stack, swapaxes, transpose, unsqueeze)
from .primitive import primitive, record
from .profiler import profile
from .serialization import load, save
from .tensor import Tensor, tensor
from .testing import gradcheck
from . import methods as _methods  # noqa: F401, I001  (last: attaches Tensor's operators)

clamp = clip
cat = concat

__all__ = [name for name in dir() if not name.startswith("_")]
