"""More of `torch.nn.functional`: `one_hot`, `normalize`, `relu6`, `softmin`, built on the
op library (so gradients, create_graph and both engines come with them).

Thread safety: pure functions of their arguments.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes as D
from ..ops import activations as _act
from ..ops import convert as _cv
from ..ops import pointwise as _pw
from ..ops import reduce as _rd
from ..tensor import Tensor

__all__ = ["one_hot", "normalize", "relu6", "softmin"]


def one_hot(tensor, num_classes: int = -1) -> Tensor:
    """PyTorch's `F.one_hot`: int64 `tensor` of class indices -> int64 of shape
    `(*tensor.shape, num_classes)` with a 1 at each index (`num_classes=-1`: the largest
    index + 1). RuntimeError for a non-int64 input, a negative index, an index
    >= num_classes, or -1 with an empty tensor, as torch's. No gradient (integers)."""
    x = tensor._data if isinstance(tensor, Tensor) else None
    if x is None:
        raise TypeError(f"one_hot(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(tensor).__name__}")
    if x.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
        raise TypeError(f"one_hot(): argument 'num_classes' must be int, not "
                        f"{type(num_classes).__name__}")
    if num_classes == -1:
        if x.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(x.max()) + 1
    elif num_classes < -1:
        raise RuntimeError("num_classes should be positive")
    if x.size and x.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if x.size and x.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    out = np.zeros(x.shape + (int(num_classes),), np.int64)
    np.put_along_axis(out, x[..., None], 1, axis=-1)
    return Tensor._wrap(out)


def normalize(input, p: float = 2.0, dim=1, eps: float = 1e-12, out=None) -> Tensor:
    """PyTorch's `F.normalize`: `input / max(norm_p(input, dim), eps)`, the norm kept as a
    dimension and broadcast (its gradient as torch's: through the norm, and zero for the
    clamped part where the norm is below eps). `out` is not supported (TypeError)."""
    if out is not None:
        raise TypeError("normalize: out= is not supported (the result is a new tensor)")
    denom = _pw.clamp_min(_rd.norm(input, p, dim, keepdim=True), eps)
    return _pw.div(input, denom)


def relu6(input, inplace: bool = False) -> Tensor:
    """PyTorch's `F.relu6`: `min(max(0, x), 6)` (hardtanh(x, 0, 6): gradient 1 strictly
    inside, 0 at the bounds). `inplace`: see `nn.functional`'s in-place form."""
    return _act.hardtanh(input, 0.0, 6.0)


def _implicit_softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """PyTorch's `F.softmin`: `softmax(-input, dim)`; `dtype` casts the input first;
    `dim=None` picks torch's implicit dimension (0 for 0-, 1- and 3-d inputs, else 1)
    with torch's deprecation warning."""
    x = input if isinstance(input, Tensor) else Tensor._wrap(np.asarray(input))
    if dtype is not None:
        x = _cv.to(x, D.to_numpy(dtype))
    if dim is None:
        dim = _implicit_softmax_dim("softmin", x.ndim, _stacklevel)
    return _rd.softmax(-x, dim)
