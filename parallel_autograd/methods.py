"""Tensor's operators, op methods and `backward`, attached to the class.

`tensor.py` defines `Tensor` alone, the op modules import it, and this module
(imported last by the package) imports both and wires them together: no import
runs in a circle. Each operator is a thin forward to its op.
"""
from __future__ import annotations

from .engine.engine import tensor_backward as _backward
from .ops.writes import METHODS as _INPLACE
from .ops import convert as _cv
from .ops import linalg as _la
from .ops import logic as _lg
from .ops import pointwise as _pw
from .ops import reduce as _rd  # noqa: F401  (declares the reductions: their methods)
from .ops import scan as _sc  # noqa: F401  (declares the scans: their methods)
from .ops import shape as _sh
from .primitive import REGISTRY
from .tensor import Tensor


def backward(self: Tensor, grad=None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Backward from this tensor on the default engine (`pa.set_default_engine`: the
    parallel engine unless changed; results are bitwise the same either way). See
    `parallel_autograd.backward` for the arguments."""
    _backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)


def _where_method(self: Tensor, condition, other) -> Tensor:
    """`x.where(condition, y)`: PyTorch's method, `where(condition, x, y)`."""
    return _pw.where(condition, self, other)


def _invert(self: Tensor) -> Tensor:
    """`~x`: bitwise_not; PyTorch's TypeError for a float tensor (the operator checks)."""
    if self._data.dtype.kind not in "biu":
        raise TypeError(f"bitwise_not: ~ (operator.invert) is only implemented on integer and "
                        f"Boolean-type tensors, got {self._data.dtype}")
    return _lg.bitwise_not(self)


# The operators of an op's own argument order are its function (one call less on every
# `a + b`); the reflected ones swap the arguments.
_OPERATORS = {
    "__add__": _pw.add,
    "__radd__": lambda a, b: _pw.add(b, a),
    "__sub__": _pw.sub,
    "__rsub__": lambda a, b: _pw.sub(b, a),
    "__mul__": _pw.mul,
    "__rmul__": lambda a, b: _pw.mul(b, a),
    "__truediv__": _pw.div,
    "__rtruediv__": lambda a, b: _pw.div(b, a),
    "__floordiv__": _pw.floor_divide,
    "__rfloordiv__": lambda a, b: _pw.floor_divide(b, a),
    "__mod__": _pw.remainder,
    "__rmod__": lambda a, b: _pw.remainder(b, a),
    "__pow__": _pw.pow,
    "__rpow__": lambda a, b: _pw.pow(b, a),
    "__matmul__": _la.matmul,
    "__rmatmul__": lambda a, b: _la.matmul(b, a),
    "__neg__": _pw.neg,
    "__pos__": _pw.positive,
    "__abs__": _pw.abs,
    # comparisons and bitwise operators: no gradient (bool or integer tensors), as PyTorch
    "__lt__": _lg.lt,
    "__le__": _lg.le,
    "__gt__": _lg.gt,
    "__ge__": _lg.ge,
    "__eq__": _lg.eq,
    "__ne__": _lg.ne,
    "__and__": _lg.bitwise_and,
    "__rand__": lambda a, b: _lg.bitwise_and(b, a),
    "__or__": _lg.bitwise_or,
    "__ror__": lambda a, b: _lg.bitwise_or(b, a),
    "__xor__": _lg.bitwise_xor,
    "__rxor__": lambda a, b: _lg.bitwise_xor(b, a),
    "__invert__": lambda a: _invert(a),
    "__lshift__": _lg.bitwise_left_shift,
    "__rlshift__": lambda a, b: _lg.bitwise_left_shift(b, a),
    "__rshift__": _lg.bitwise_right_shift,
    "__rrshift__": lambda a, b: _lg.bitwise_right_shift(b, a),
}

# PyTorch's other Tensor methods, each module's `METHODS` table (name -> function):
# conversions and introspection, in-place math/shape/random methods (the declared ops'
# methods come from the registry)
_TABLES = (_cv,)


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
    for op in REGISTRY:  # the declared ops' methods (`defop(method=...)`)
        if op.method is not None:
            for name in (op.method, *op.aliases):
                setattr(Tensor, name, op.fn)
    for module in _TABLES:
        for name, fn in module.METHODS.items():
            setattr(Tensor, name, fn)
    Tensor.where = _where_method
    Tensor.T = property(lambda a: _sh.permute(a, tuple(range(a._data.ndim))[::-1]))
    Tensor.mT = property(_sh.mT)
    Tensor.backward = backward


attach()
