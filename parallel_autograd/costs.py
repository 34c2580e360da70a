"""Cost constants shared by the engine's cost model (`engine/cost.py`) and the ops that
estimate their backward work when they record a node (`Node.cost`, about nanoseconds on
one core). A leaf module: it imports nothing of the package, so the op layer reads these
without importing the engine.

Thread safety: constants and pure functions.
"""
from __future__ import annotations

__all__ = ["BLAS_FLOPS_PER_NS", "gemm_cost"]

#: Floating-point operations per nanosecond one core's BLAS sustains on a GEMM (measured
#: on the development machine, about 30). Converts GEMM flops to `Node.cost` units.
BLAS_FLOPS_PER_NS = 32


def gemm_cost(out_size: int, inner: int) -> float:
    """Backward cost of a product with `out_size` output elements summing over `inner`:
    two GEMMs of the forward's size (one per input gradient), 2 flops per multiply-add."""
    return 4 * max(out_size, 1) * inner / BLAS_FLOPS_PER_NS
