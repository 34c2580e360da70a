"""`pa.autograd`: PyTorch's `torch.autograd` names. `functional` holds jacobian, hessian,
vjp, jvp, hvp and vhp; `grad` and `backward` are the package's own (sequential engine;
`grad` with `is_grads_batched`: engine/rows.py);
`detect_anomaly` and its companions are the package's (parallel_autograd/anomaly.py);
`queue_callback` runs a function at the end of the running backward pass (engine/callbacks.py);
`Function` is PyTorch's custom op on Tensors (`function.py`; `pa.Function` is the package's
older form, whose forward gets ndarrays)."""
from ..anomaly import (detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                       set_detect_anomaly)
from ..engine.callbacks import queue_callback
from ..engine.rows import grad
from ..engine.sequential import backward
from . import function, functional
from .function import Function

__all__ = ["Function", "backward", "detect_anomaly", "function", "functional", "grad",
           "is_anomaly_check_nan_enabled", "is_anomaly_enabled", "queue_callback",
           "set_detect_anomaly"]
