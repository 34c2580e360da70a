"""`Parameter`: a leaf tensor that a `Module` registers as one of its parameters."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..creation import array_of
from ..tensor import Tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A leaf tensor that requires grad (by default) and that `Module.__setattr__`
    registers as a parameter (PyTorch's `torch.nn.Parameter`).

    Args:
        data: an ndarray, a Tensor or array-like; None gives an empty tensor of the
            default dtype. Like PyTorch, an ndarray or a Tensor is not copied: the
            parameter shares its memory (and, for a Tensor, its version counter, as
            `detach()` does); other array-likes are converted as `pa.tensor` converts them
            (Python floats: the default dtype). The parameter is always a leaf,
            even when `data` has a gradient history.
        requires_grad: whether the parameter requires grad (default True); a
            non-floating `data` with `requires_grad=True` raises TypeError.

    Pickling and `copy.deepcopy` keep the class (they come back as Parameters) and,
    within one pickle or deepcopy, the sharing between modules.
    """

    def __init__(self, data=None, requires_grad: bool = True):
        vc = None
        if data is None:
            arr = np.empty(0, D.to_numpy(D.get_default_dtype()))
        elif isinstance(data, Tensor):
            arr, vc = data._data, data._vc
        elif isinstance(data, (np.ndarray, np.generic)):
            arr = np.asarray(data)
        else:   # Python floats take the default dtype, as in `pa.tensor`
            arr = array_of(data, None)
        self._init(arr, None)
        if vc is not None:
            self._vc = vc
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        """`Parameter containing:` and the tensor's repr, like PyTorch."""
        t = Tensor._wrap(self._data, None, self._vc)
        t._requires_grad = self._requires_grad
        return "Parameter containing:\n" + repr(t)
