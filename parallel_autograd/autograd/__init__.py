"""`pa.autograd`: PyTorch's `torch.autograd` names. `functional` holds jacobian, hessian,
vjp, jvp, hvp and vhp; `grad` and `backward` are the package's own (sequential engine)."""
from ..engine.sequential import backward, grad
from . import functional

__all__ = ["backward", "functional", "grad"]
