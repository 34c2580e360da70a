"""What the linear-algebra ops share: argument checks with PyTorch's exception types,
LAPACK calls whose failures name the op and the batch element, small array helpers and
the cost estimate. One copy each (products, decompositions and norms import them).

PyTorch's types: a shape, rank or dtype that does not fit is a RuntimeError, a dimension
out of range an IndexError, a singular (or not positive-definite) matrix a `LinAlgError`
(a RuntimeError, as `torch.linalg.LinAlgError`).

Thread safety: pure functions.
"""
from __future__ import annotations

import numpy as np

from ...costs import gemm_cost
from ...tensor import Tensor
from ..shape import swapaxes

__all__ = ["LinAlgError", "T", "batch_shape", "cost", "data", "floating", "is_vector_rhs",
           "lapack", "mT", "same_dtype", "square"]


class LinAlgError(RuntimeError):
    """A matrix for which the operation is not defined (singular, not positive-definite)
    or a LAPACK routine that did not converge: `torch.linalg.LinAlgError`, a RuntimeError.
    The message names the op and the first failing matrix of a batch."""


def data(x) -> np.ndarray:
    """A Tensor's array, or `x` as an array."""
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def floating(name: str, x, what: str = "A", min_ndim: int = 2, like=None) -> np.ndarray:
    """`x`'s array, checked: float32/float64 and at least `min_ndim` dimensions. A
    non-array argument (a list) takes `like`'s dtype; with `like`, the dtypes must agree."""
    if like is not None and not isinstance(x, (Tensor, np.ndarray)):
        a = np.asarray(x, dtype=like.dtype)
    else:
        a = data(x)
    if a.dtype not in (np.float32, np.float64):
        raise RuntimeError(f"{name}: Expected a floating point tensor (float32 or float64) "
                           f"as {what}, got {a.dtype}")
    if like is not None and a.dtype != like.dtype:
        raise RuntimeError(f"{name}: Expected A and {what} to have the same dtype, but found "
                           f"A of type {like.dtype} and {what} of type {a.dtype} instead")
    if a.ndim < min_ndim:
        raise RuntimeError(f"{name}: The input tensor {what} must have at least {min_ndim} "
                           f"dimensions, got shape {a.shape}")
    return a


def square(name: str, a: np.ndarray) -> None:
    """RuntimeError unless `a` is a batch of square matrices."""
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2]} by {a.shape[-1]} matrices")


def same_dtype(name: str, what: str, *arrays) -> None:
    """PyTorch's products refuse operands of different dtypes (no promotion)."""
    dtypes = [a.dtype if type(a) is np.ndarray else np.result_type(a) for a in arrays]
    if any(d != dtypes[0] for d in dtypes):
        raise RuntimeError(f"{name}: expected {what} to have the same dtype, but got: "
                           f"{' != '.join(str(d) for d in dtypes)}")


def lapack(name: str, fn, a: np.ndarray, problem: str, *args, **kwargs):
    """`fn(a, ...)`, numpy's LinAlgError turned into a `LinAlgError` naming the op, the
    problem and the first failing matrix of a batch."""
    try:
        return fn(a, *args, **kwargs)
    except np.linalg.LinAlgError:
        pass
    where = ""
    if a.ndim > 2:  # the error path only: find the first matrix that fails
        flat = a.reshape((-1,) + a.shape[-2:])
        for i in range(flat.shape[0]):
            try:
                fn(flat[i], *args, **kwargs)
            except np.linalg.LinAlgError:
                index = tuple(int(j) for j in np.unravel_index(i, a.shape[:-2]))
                where = f" (batch element {index})"
                break
    raise LinAlgError(f"{name}: {problem}{where}") from None


def T(x: np.ndarray) -> np.ndarray:
    """An array's last two dimensions exchanged (a view)."""
    return np.swapaxes(x, -1, -2)


def mT(x):
    """The last two dimensions exchanged, recorded (formulas: arrays or Tensors)."""
    return swapaxes(x, -1, -2)


def is_vector_rhs(a_shape: tuple, b_shape: tuple) -> bool:
    """torch's rule (linalg_solve_is_vector_rhs): B is a (batch of) vector(s) when it is
    1-D or has exactly A's shape without the last dimension."""
    return len(b_shape) == 1 or (len(b_shape) == len(a_shape) - 1
                                 and tuple(b_shape) == tuple(a_shape[:-1]))


def batch_shape(name: str, a_shape: tuple, b_shape: tuple) -> tuple:
    """The broadcast batch dimensions of A and B (matrices: the last two are not batch)."""
    try:
        return np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise RuntimeError(f"{name}: the batch dimensions of A {a_shape[:-2]} and B "
                           f"{b_shape[:-2]} do not broadcast against each other") from None


def cost(ans, A, *_, **__) -> float:
    """The backward work of a decomposition's rule: LAPACK and GEMMs, about n^3 per matrix
    (`costs.gemm_cost`, n the larger side)."""
    shape = A.shape if type(A) is np.ndarray else np.shape(A)
    side = max(shape[-2:]) if len(shape) > 1 else 1
    return gemm_cost(ans.size, max(side, 1))
