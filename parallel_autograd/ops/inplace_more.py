"""More of PyTorch's in-place methods, made as `parallel_autograd/inplace.py` makes its own
(same checks: refused on a leaf that requires grad or a tensor with history while grad
mode is on, allowed under `no_grad()`; the version counter bumped):

- math: `exp_ sqrt_ log_ abs_ relu_ sigmoid_ tanh_ square_ sin_ cos_ floor_ ceil_ trunc_
  reciprocal_ rsqrt_ log1p_ expm1_` write into the tensor's own memory (an integer tensor
  and a float result is a TypeError, as PyTorch's "result type Float can't be cast");
- shape: `unsqueeze_ squeeze_ transpose_ t_` give the tensor a new view of its memory
  (views made from it before keep their shape, as in PyTorch);
- random: `uniform_(from, to) normal_(mean, std) bernoulli_(p)`, and the out-of-place
  `bernoulli(p=None)`, draw from the current generator (`pa.manual_seed`,
  `parallel_autograd.random`) or `generator=`, a numpy Generator.

Thread safety: like any write to an array, not synchronised with readers.
"""
from __future__ import annotations

import numpy as np

from .. import version
from ..inplace import _check, _inplace
from ..random import resolve_generator
from ..tensor import Tensor
from . import index as ix
from .forms import depends_on

__all__ = ["bernoulli", "METHODS"]


# ---- math -------------------------------------------------------------------------------------
def _ufunc(ufunc):
    def write(d):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ufunc(d, out=d)
    return write


def _float_only(write):
    """`write` for float tensors; others refused before anything is written."""
    def checked(d):
        if d.dtype.kind not in "fc":
            raise TypeError(f"result type float can't be cast to the tensor's dtype {d.dtype}")
        write(d)
    return checked


def _sigmoid(d):
    with np.errstate(over="ignore"):      # 1 / (1 + exp(-x)), as pa.sigmoid
        np.negative(d, out=d)
        np.exp(d, out=d)
        d += 1
        np.divide(1, d, out=d)


def _rsqrt(d):
    with np.errstate(divide="ignore", invalid="ignore"):
        np.sqrt(d, out=d)
        np.divide(1, d, out=d)


_MATH = {
    "exp_": _ufunc(np.exp), "sqrt_": _ufunc(np.sqrt), "log_": _ufunc(np.log),
    "abs_": _ufunc(np.abs), "relu_": lambda d: np.maximum(d, 0, out=d),
    "sigmoid_": _float_only(_sigmoid), "tanh_": _ufunc(np.tanh),
    "square_": lambda d: np.multiply(d, d, out=d), "sin_": _ufunc(np.sin),
    "cos_": _ufunc(np.cos), "floor_": _ufunc(np.floor), "ceil_": _ufunc(np.ceil),
    "trunc_": _ufunc(np.trunc), "reciprocal_": _float_only(_ufunc(np.reciprocal)),
    "rsqrt_": _float_only(_rsqrt), "log1p_": _ufunc(np.log1p),
    "expm1_": _ufunc(np.expm1),
}


# ---- shape: a new view of the same memory ----------------------------------------------------
def _reshaping(name: str, view):
    """An in-place shape method: `view(data, *args)` is the tensor's new array."""
    def method(self: Tensor, *args) -> Tensor:
        _check(self, name, ())
        self.data = view(self.data, *args)
        version.bump(self)
        return self

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: the tensor becomes `{name[:-1]}`'s view of its memory."
    return method


def _unsqueeze(d, dim):
    return np.expand_dims(d, ix.old_dim(dim, d.ndim + 1, "unsqueeze_"))


def _squeeze(d, dim=None):
    if d.ndim == 0:
        return d
    dims = range(d.ndim) if dim is None else ix.old_dims(dim, d.ndim, "squeeze_")
    return np.squeeze(d, axis=tuple(k for k in dims if d.shape[k] == 1))  # others: kept


def _transpose(d, dim0, dim1):
    return np.swapaxes(d, ix.old_dim(dim0, d.ndim, "transpose_"), ix.old_dim(dim1, d.ndim,
                                                                         "transpose_"))


def _t(d):
    if d.ndim > 2:
        raise ValueError(f"t_: expects a tensor with <= 2 dimensions, but self is {d.ndim}-D")
    return d.T


# ---- random ---------------------------------------------------------------------------------
def _store(d, values) -> None:
    np.copyto(d, values, casting="unsafe")


def _uniform(d, a=0.0, b=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise TypeError(f"expected a floating point tensor, got dtype {d.dtype}")
    if a > b:
        raise ValueError(f"expects to return a [from, to) range, but found from={a} > to={b}")
    _store(d, resolve_generator(generator).uniform(a, b, d.shape))
    if a < b and d.dtype != np.float64:   # rounding to a narrower dtype may reach `to`
        top = np.nextafter(d.dtype.type(b), d.dtype.type(a))
        np.minimum(d, top, out=d)


def _normal(d, mean=0.0, std=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise TypeError(f"expected a floating point tensor, got dtype {d.dtype}")
    if not std >= 0:
        raise ValueError(f"normal expects std >= 0.0, but found std {std}")
    _store(d, resolve_generator(generator).normal(mean, std, d.shape))


def _probabilities(p, prefix: str = "") -> np.ndarray:
    p = np.asarray(p)
    if p.dtype.kind not in "biuf":
        raise TypeError(f"{prefix}p must be a number or a float tensor, got dtype {p.dtype}")
    if not np.all((p >= 0) & (p <= 1)):
        got = p.item() if p.ndim == 0 else "a tensor with values outside it"
        raise ValueError(f"{prefix}expects p to be in [0, 1], but got p={got}")
    return p


def _bernoulli(d, p=0.5, *, generator=None):
    p = _probabilities(p)
    _store(d, resolve_generator(generator).random(d.shape) < np.broadcast_to(p, d.shape))


def bernoulli(input, p=None, *, generator=None) -> Tensor:
    """0 or 1 (input's dtype) drawn elementwise with probability `input` (or `p`, a number,
    for every element); the gradient is 0 (PyTorch's)."""
    x = input.data if isinstance(input, Tensor) else np.asarray(input)
    prob = _probabilities(x if p is None else (p.data if isinstance(p, Tensor) else p),
                          "bernoulli: ")
    draw = resolve_generator(generator).random(x.shape) < np.broadcast_to(prob, x.shape)
    out = depends_on(draw.astype(x.dtype), input)
    return out if isinstance(out, Tensor) else Tensor._wrap(out)


METHODS = {name: _inplace(name, write) for name, write in _MATH.items()}
METHODS.update({
    "unsqueeze_": _reshaping("unsqueeze_", _unsqueeze),
    "squeeze_": _reshaping("squeeze_", _squeeze),
    "transpose_": _reshaping("transpose_", _transpose),
    "swapaxes_": _reshaping("swapaxes_", _transpose),
    "t_": _reshaping("t_", _t),
    "uniform_": _inplace("uniform_", _uniform),
    "normal_": _inplace("normal_", _normal),
    "bernoulli_": _inplace("bernoulli_", _bernoulli),
    "bernoulli": bernoulli,
})
for _name in _MATH:
    METHODS[_name].__doc__ = f"`{_name[:-1]}` in place (the tensor's own memory is written)."
