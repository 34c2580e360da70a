"""`pa.nn.parallel`: data-parallel training across processes (`DistributedDataParallel`,
over `pa.distributed`)."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
