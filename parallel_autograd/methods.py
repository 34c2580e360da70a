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
from .ops import elementwise as _ew
from .ops import graph as _graph  # noqa: F401  (the rules' differentiable forms)
from .ops import inplace_more as _ipm
from . import linalg as _lin
from .ops import linalg as _la
from .ops import logic as _lg
from .ops import products as _pr
from .ops import reduce as _rd  # noqa: F401  (declares the reductions: their methods)
from .ops import scan as _sc  # noqa: F401  (declares the scans: their methods)
from .ops import unary as _un
from .ops import shape as _sh
from .primitive import REGISTRY
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
    "__lt__": _comparison(np.less),
    "__le__": _comparison(np.less_equal),
    "__gt__": _comparison(np.greater),
    "__ge__": _comparison(np.greater_equal),
    "__eq__": _comparison(np.equal),
    "__ne__": _comparison(np.not_equal),
}

_METHODS = {
    _ew: ("sigmoid", "relu", "maximum", "minimum", "clip", "leaky_relu", "gelu", "silu", "pow"),
    _un: ("square", "prelu"),
    _lin: ("det", "slogdet", "inverse", "pinverse"),
}

# PyTorch's other Tensor methods, each module's `METHODS` table (name -> function):
# conversions and introspection, arithmetic, products, comparisons and logic, in-place
# math/shape/random methods
_TABLES = (_cv, _ar, _pr, _lg, _ipm)


def attach() -> None:
    """Put the operators, op methods and `backward` on `Tensor` (idempotent)."""
    for name, fn in {**_OPERATORS, **_INPLACE}.items():
        setattr(Tensor, name, fn)
    for op in REGISTRY:  # the declared ops' methods (`defop(method=...)`)
        if op.method is not None:
            for name in (op.method, *op.aliases):
                setattr(Tensor, name, op.fn)
    for module, names in _METHODS.items():
        for name in names:
            setattr(Tensor, name, getattr(module, name))
    for module in _TABLES:
        for name, fn in module.METHODS.items():
            setattr(Tensor, name, fn)
    Tensor.clamp = _ew.clip
    Tensor.matmul = _la.matmul
    Tensor.T = property(lambda a: _sh.permute(a, tuple(range(a.data.ndim))[::-1]))
    Tensor.mT = property(_sh.mT)
    Tensor.backward = backward


attach()
