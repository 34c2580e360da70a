"""`pa.autograd`: PyTorch's `torch.autograd` names. `functional` holds jacobian, hessian,
vjp, jvp, hvp and vhp; `grad` and `backward` are the package's own (sequential engine);
`detect_anomaly` and its companions are the package's (parallel_autograd/anomaly.py);
`queue_callback` runs a function at the end of the running backward pass (engine/callbacks.py)."""
from ..anomaly import (detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                       set_detect_anomaly)
from ..engine.callbacks import queue_callback
from ..engine.sequential import backward, grad
from . import functional

__all__ = ["backward", "detect_anomaly", "functional", "grad", "is_anomaly_check_nan_enabled",
           "is_anomaly_enabled", "queue_callback", "set_detect_anomaly"]
