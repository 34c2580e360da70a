"""`Parameter`: a leaf tensor that a `Module` registers as one of its parameters."""
from __future__ import annotations

import numpy as np

from ..dtypes import get_default_dtype, to_numpy
from ..tensor import Tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A leaf tensor that requires grad (by default) and that `Module.__setattr__`
    registers as a parameter (PyTorch's `torch.nn.Parameter`).

    Args:
        data: an ndarray, a Tensor or array-like; None gives an empty array of the
            default dtype (`pa.set_default_dtype`), as PyTorch's.
            Like PyTorch, an ndarray or a Tensor is not copied: the parameter shares its
            memory (and, for a Tensor, its version counter, as `detach()` does); other
            array-likes are converted with `np.asarray`. The parameter is always a leaf,
            even when `data` has a gradient history.
        requires_grad: whether the parameter requires grad (default True); a
            non-floating `data` with `requires_grad=True` raises TypeError.

    Pickling and `copy.deepcopy` keep the class (they come back as Parameters) and,
    within one pickle or deepcopy, the sharing between modules.
    """

    def __init__(self, data=None, requires_grad: bool = True):
        vc = None
        if data is None:
            arr = np.empty(0, dtype=to_numpy(get_default_dtype()))
        elif isinstance(data, Tensor):
            arr, vc = data.data, data._vc
        else:
            arr = np.asarray(data)
        self._init(arr, None)
        if vc is not None:
            self._vc = vc
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        """`Parameter containing:` and the tensor's repr, like PyTorch."""
        t = Tensor._wrap(self.data, None, self._vc)
        t._requires_grad = self._requires_grad
        return "Parameter containing:\n" + repr(t)
