"""Neural-network building blocks (`parallel_autograd.nn.functional`)."""
from . import functional  # noqa: F401
