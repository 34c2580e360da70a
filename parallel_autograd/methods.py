"""Tensor's operators, op methods and `backward`, attached to the class.

`tensor.py` defines `Tensor` alone, the op modules import it, and this module
(imported last by the package) imports both and wires them together: no import
runs in a circle. Each operator is a thin forward to its op.
"""
from __future__ import annotations

import numpy as np

from .engine.engine import tensor_backward as _backward
from .inplace import METHODS as _INPLACE
from .ops import arith as _ar
from .ops import convert as _cv
from .ops import cumulative as _cu
from .ops import elementwise as _ew
from .ops import graph as _graph  # noqa: F401  (the rules' differentiable forms)
from .ops import index as _ix
from .ops import inplace_more as _ipm
from . import linalg as _lin
from .ops import linalg as _la
from .ops import logic as _lg
from .ops import products as _pr
from .ops import reduce as _rd
from .ops import scan as _sc
from .ops import unary as _un
from .ops import shape as _sh
from .ops import views as _vw
from .tensor import Tensor


def backward(self: Tensor, grad=None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Backward from this tensor on the default engine (`pa.set_default_engine`: the
    parallel engine unless changed; results are bitwise the same either way). See
    `parallel_autograd.backward` for the arguments."""
    _backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)


def _raw(x):
    return x.data if isinstance(x, Tensor) else x


def _comparison(ufunc):
    # Comparisons give plain boolean tensors (no gradient), like PyTorch.
    return lambda a, b: Tensor._wrap(ufunc(a.data, _raw(b)))


_OPERATORS = {
    "__add__": lambda a, b: _ew.add(a, b),
    "__radd__": lambda a, b: _ew.add(b, a),
    "__sub__": lambda a, b: _ew.sub(a, b),
    "__rsub__": lambda a, b: _ew.sub(b, a),
    "__mul__": lambda a, b: _ew.mul(a, b),
    "__rmul__": lambda a, b: _ew.mul(b, a),
    "__truediv__": lambda a, b: _ew.div(a, b),
    "__rtruediv__": lambda a, b: _ew.div(b, a),
    "__pow__": lambda a, b: _ew.pow(a, b),
    "__rpow__": lambda a, b: _ew.pow(b, a),
    "__matmul__": lambda a, b: _la.matmul(a, b),
    "__rmatmul__": lambda a, b: _la.matmul(b, a),
    "__neg__": lambda a: _ew.neg(a),
    "__pos__": lambda a: a,
    "__abs__": lambda a: _ew.abs(a),
    "__getitem__": lambda a, idx: _sh.getitem(a, idx),
    "__lt__": _comparison(np.less),
    "__le__": _comparison(np.less_equal),
    "__gt__": _comparison(np.greater),
    "__ge__": _comparison(np.greater_equal),
    "__eq__": _comparison(np.equal),
    "__ne__": _comparison(np.not_equal),
}

_METHODS = {
    _ew: ("exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "neg",
          "maximum", "minimum", "clip", "leaky_relu", "gelu", "silu", "pow"),
    _rd: ("sum", "mean", "max", "min", "var", "softmax", "log_softmax", "logsumexp"),
    _sh: ("reshape", "transpose", "permute", "expand", "broadcast_to", "squeeze",
          "unsqueeze", "flatten", "split", "swapaxes", "clone"),
    _ix: ("repeat", "tile", "flip", "roll", "tril", "triu", "diagonal", "diag_embed", "gather",
          "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "masked_fill",
          "masked_scatter", "take_along_dim", "narrow", "movedim", "unbind", "chunk"),
    _un: ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
          "expm1", "log2", "log10", "exp2", "erf", "erfc", "reciprocal", "rsqrt", "square",
          "sign", "floor", "ceil", "round", "trunc", "prelu"),
    _sc: ("prod", "std", "norm", "cumsum", "cumprod", "amax", "amin", "argmax", "argmin",
          "sort", "topk", "kthvalue", "median"),
    _lin: ("det", "slogdet", "inverse", "pinverse"),
}

# PyTorch's other Tensor methods, each module's `METHODS` table (name -> function):
# conversions and introspection, arithmetic, products, comparisons and logic, shape
# methods, running extrema, in-place math/shape/random methods
_TABLES = (_cv, _ar, _pr, _lg, _vw, _cu, _ipm)


def _mT(a: Tensor) -> Tensor:
    """The last two dimensions swapped; a 0-d tensor as it is (PyTorch's deprecated
    identity), a 1-D one refused (PyTorch's error)."""
    if a.ndim == 1:
        raise ValueError("mT: only supported on matrices or batches of matrices, got a 1-D "
                         "tensor")
    return _sh.swapaxes(a, -1, -2) if a.ndim else _sh.swapaxes(a, 0, 0)


def attach() -> None:
    """Put the operators, op methods and `backward` on `Tensor` (idempotent)."""
    for name, fn in {**_OPERATORS, **_INPLACE}.items():
        setattr(Tensor, name, fn)
    for module, names in _METHODS.items():
        for name in names:
            setattr(Tensor, name, getattr(module, name))
    for module in _TABLES:
        for name, fn in module.METHODS.items():
            setattr(Tensor, name, fn)
    Tensor.clamp = _ew.clip
    Tensor.view = _sh.reshape
    Tensor.matmul = _la.matmul
    Tensor.T = property(lambda a: _sh.transpose(a))
    Tensor.mT = property(_mT)
    Tensor.backward = backward


attach()
