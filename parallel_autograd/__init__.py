"""parallel_autograd: reverse-mode autodiff on numpy with a parallel backward engine."""
import warnings as _warnings
from . import allocator, autograd, distributed, intraop, memory, nn, optim, utils  # noqa: F401
from . import amp, backends, cuda  # noqa: F401  (torch.amp, torch.backends' flags, torch.cuda
# without CUDA)
from .amp import autocast
from .allocator import tune_allocator
from .checkpoint import checkpoint, checkpoint_sequential
from .anomaly import (detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                      set_detect_anomaly)
from . import dtypes as _dtypes
from .creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like,
                       linspace, logspace, meshgrid, multinomial, normal, ones, ones_like, rand,
                       rand_like, randint, randint_like, randn, randn_like, randperm, tensor,
                       zeros, zeros_like)
from .device import device
from .dtypes import (bfloat16, bool, can_cast, cdouble, cfloat, complex64,  # noqa: A004
                     complex128, double, dtype, finfo, float, float16, float32, float64,
                     get_default_dtype, half, iinfo, int, int8, int16, int32, int64, long,
                     promote_types, result_type, set_default_dtype, short, uint8, uint16,
                     uint32, uint64)
from .generator import Generator
from .engine.rows import grad
from .engine.sequential import backward
from .engine.engine import (Engine, backward_parallel, default_engine, get_default_engine,
                            grad_parallel, set_default_engine)
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,
                        no_grad, set_grad_enabled)
from .ops import activations as _activations  # noqa: F401  (declares them: exported below)
from .ops.index import take_along_axis
from .ops.writes import bernoulli
from .ops import logic as _logic  # noqa: F401  (declares them: exported below)
from . import linalg  # noqa: F401, I001  (pa.linalg: torch.linalg's ops)
from .ops import reduce as _reduce, scan as _scan  # noqa: F401  (their ops: exported below)
# numpy's and the package's own names beside PyTorch's (the registry exports those)
from .ops.shape import getitem, pad, repeat, sum_to_size
from .primitive import exports as _exports
from .primitive import primitive, record
from .profiler import profile
from .random import default_generator, manual_seed
from .runtime import (are_deterministic_algorithms_enabled, get_float32_matmul_precision,
                      get_num_interop_threads, get_num_threads,
                      is_deterministic_algorithms_warn_only_enabled, set_float32_matmul_precision,
                      set_num_interop_threads, set_num_threads, use_deterministic_algorithms)
from .serialization import load, save
from .tensor import Size, Tensor, numel
from .testing import gradcheck, gradgradcheck
from . import methods as _methods  # noqa: F401, I001  (last: attaches Tensor's operators)

__version__ = "0.1.0"
_BUILTINS = {"abs", "all", "any", "max", "min", "pow", "round", "sum",
             "bool", "float", "int"}  # the last three: dtypes (pa.float is float32)
# PyTorch's names made by this package beyond the ops: dtypes, factories, devices
_TORCH_NAMES = [n for n in _dtypes.__all__ if n not in ("as_dtype", "to_numpy")] + [
    "as_tensor", "device", "empty", "empty_like", "eye", "from_numpy", "full", "full_like",
    "Generator", "inference_mode", "is_inference_mode_enabled", "linspace", "logspace", "meshgrid",
    "multinomial", "normal", "ones_like",
    "rand", "rand_like", "randint", "randint_like", "randn_like", "randperm", "zeros_like",
    "are_deterministic_algorithms_enabled", "get_float32_matmul_precision",
    "get_num_interop_threads", "get_num_threads", "is_deterministic_algorithms_warn_only_enabled",
    "set_float32_matmul_precision", "set_num_interop_threads", "set_num_threads",
    "use_deterministic_algorithms", "numel", "Size", "autocast"]

# What `from parallel_autograd import *` brings in: the names below. Not the submodules
# (use pa.nn, pa.optim), and not the ops named like Python builtins (abs, max, min, pow,
# round, sum), which a star import would shadow silently: call them as pa.max(...) or as
# tensor methods (t.max()).
__all__ = [
    "einsum", "getitem", "pad", "repeat", "sum_to_size", "take_along_axis",
    "arange", "backward", "backward_parallel", "checkpoint",
    "checkpoint_sequential", "default_engine",
    "default_generator", "detect_anomaly", "enable_grad", "Engine",
    "Function", "FunctionCtx", "get_default_engine", "grad",
    "grad_parallel", "gradcheck", "gradgradcheck", "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled", "is_grad_enabled", "load", "manual_seed",
    "no_grad", "once_differentiable", "ones", "primitive", "profile",
    "randn", "record", "save", "set_default_engine", "set_detect_anomaly",
    "set_grad_enabled", "Tensor", "tensor", "tune_allocator", "zeros",
    # PyTorch's function behind the Tensor method of ops/writes
    "bernoulli",
]

# The declared ops (`primitive.defop`) of PyTorch's `torch` namespace: the registry exports
# them, and the star import takes those not named like Python builtins (abs, max, min, pow,
# round, sum, all, any), which it would shadow silently.
globals().update(_exports("torch"))
__all__ = sorted(set(__all__) | {n for n in _exports("torch") if n not in _BUILTINS}
                 | {n for n in _TORCH_NAMES if n not in _BUILTINS})

# numpy's floating-point RuntimeWarnings raised inside the library's kernels (log(0),
# sqrt(-1), 0/0, overflow): PyTorch's ops return inf/nan silently, and so do the ops here.
# Scoped to this package's modules: the caller's own numpy code warns as before. An
# `np.errstate` the caller sets ("raise", "call", "log") still applies inside the ops, and
# `warnings.simplefilter("always")` (or pytest.warns) shows the warnings again.
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"parallel_autograd(\.|$)")
