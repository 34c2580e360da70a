"""`torch.utils.checkpoint`'s names: `checkpoint` and `checkpoint_sequential`
(parallel_autograd.checkpoint has them and their documentation)."""
from ..checkpoint import checkpoint, checkpoint_sequential

__all__ = ["checkpoint", "checkpoint_sequential"]
