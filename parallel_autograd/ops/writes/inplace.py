"""In-place ops: `+= -= *= /=` and PyTorch's trailing-underscore methods (arithmetic, fills,
copies and the index writes `scatter_ scatter_add_ index_add_ index_fill_ masked_fill_`).

They write into the tensor's own ndarray (views and other references see the change)
and bump its version counter (`parallel_autograd.version`), so a backward that needs
an overwritten value fails with a clear error instead of computing a wrong gradient.

When they are allowed (PyTorch's rules, stricter for views):
- under `no_grad()` (the optimizer-step case), or on tensors that do not require grad,
  with no operand that requires grad: allowed;
- on a leaf that requires grad, with grad mode on: RuntimeError (PyTorch's "a leaf
  Variable that requires grad is being used in an in-place operation");
- on a tensor with a gradient history, or with an operand that requires grad, with
  grad mode on: recorded, as PyTorch records them (`record.rebase`: the tensor takes
  the out-of-place op's node as its history; docs/inplace.md); through a view of
  another tensor's memory: RuntimeError (PyTorch rewrites the viewed tensor's history).

Writes through `.data` (a Tensor with no history and a counter of its own) bypass the
checks and this tensor's version counter, as in PyTorch. Thread safety: like any write to
an array, not synchronised with readers.

`t[index] = value` (`__setitem__`, `setitem.py`) follows the same rules when nothing
requires grad or under `no_grad()`, and otherwise, unlike the methods here, is recorded:
a differentiable write (`index_put`) that `t` takes as its new history.

More of PyTorch's in-place methods, with the same checks:

- math: `exp_ sqrt_ log_ abs_ relu_ sigmoid_ tanh_ square_ sin_ cos_ floor_ ceil_ trunc_
  reciprocal_ rsqrt_ log1p_ expm1_` write into the tensor's own memory (an integer tensor
  and a float result is a TypeError, as PyTorch's "result type Float can't be cast");
- shape: `unsqueeze_ squeeze_ transpose_ t_` give the tensor a new view of its memory
  (views made from it before keep their shape, as in PyTorch);
- random: `uniform_(from, to) normal_(mean, std) bernoulli_(p)`, and the out-of-place
  `bernoulli(p=None)`, draw from the current generator (`pa.manual_seed`,
  `parallel_autograd.random`) or `generator=`, a numpy Generator.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ... import version
from ...dtypes import not_implemented, promote_operands, scalar_type_name
from ...grad_mode import is_grad_enabled
from ...random import resolve_generator
from ...tensor import Tensor
from .. import activations as AC
from .. import index as IX
from .. import pointwise as PW
from .. import shape as S
from ..forms import depends_on
from .record import rebase, rebase_view
from .setitem import index_put, setitem

__all__ = ["bernoulli", "METHODS"]


def _raw(x):
    return x._data if isinstance(x, Tensor) else x


_LEAF = ("a leaf Variable that requires grad is being used in an in-place operation. "
         "({name}: for an update such as an optimizer step, run it under "
         "`with pa.no_grad():`)")


def _records(t: Tensor, name: str, operands) -> bool:
    """Whether the write is recorded (grad mode on, and `t` or an operand requires grad);
    a leaf that requires grad is refused (PyTorch's RuntimeError)."""
    if not is_grad_enabled():
        return False
    if t._requires_grad:
        if t.grad_fn is None:
            raise RuntimeError(_LEAF.format(name=name))
        return True
    for o in operands:
        if isinstance(o, Tensor) and o._requires_grad:
            return True
    return False


def _check(t: Tensor, name: str, operands) -> None:
    """Refuse a write that would need recording (the methods that have no recorded form)."""
    if _records(t, name, operands):
        raise RuntimeError(
            f"{name}: this in-place operation is not recorded on a tensor with a gradient "
            f"history or with an operand that requires grad; write it out of place, or run "
            f"it under pa.no_grad()")


def _inplace(name: str, write, recorded=None):
    """An in-place method: `write(data, *raw_operands, **kwargs)` writes into `data`.
    With grad involved, `recorded(old, *operands, **kwargs)`, the out-of-place op, gives
    the new values and the node `t` takes as its history (`record.rebase`); None: such a
    write is refused. A tensor of a dtype the op's declaration does not take (`dtypes=`:
    `abs_` of bool) is refused as the op refuses it, before anything is written."""
    op = getattr(recorded, "op", None)
    allowed = None if op is None else op.dtypes

    def method(self: Tensor, *operands, **kwargs) -> Tensor:
        if allowed is not None and self._data.dtype not in allowed:
            raise not_implemented(op.name, self._data.dtype)
        if _records(self, name, operands + tuple(kwargs.values())):
            if recorded is None:
                _check(self, name, operands + tuple(kwargs.values()))
            return rebase(self, name, recorded, operands, kwargs)
        try:
            write(self._data, *[_raw(o) for o in operands],
                  **{k: _raw(v) for k, v in kwargs.items()})
        except NotImplementedError:  # (PyTorch's refusal of a dtype: its type kept)
            raise
        except (TypeError, ValueError) as e:
            kind = ValueError if isinstance(e, ValueError) else TypeError
            raise kind(f"{name}: {e}") from e
        version.bump(self)
        return self

    method.__name__ = method.__qualname__ = name
    return method


def _promoting(name: str, write, n: int = 1, to_float: bool = False):
    """`write` with PyTorch's type promotion of an in-place op: the tensor and its first
    `n` operands promoted together (`dtypes.result_type`), the operands cast to that
    dtype (the tensor is written in place: never cast), and a result of a higher category
    than the tensor's refused (RuntimeError, PyTorch's "result type Float can't be cast to
    the desired output type Long") before anything is written."""
    wheres = [tuple(range(k + 1)) for k in range(n + 1)]

    def promoted(d, *operands, **kwargs):
        values = [d, *operands[:n]]
        try:
            p = promote_operands(values, wheres[len(values) - 1], to_float, into=0)
        except RuntimeError as e:
            raise RuntimeError(f"{name}: {e}") from None
        if p is not values:
            operands = (*p[1:], *operands[n:])
        write(d, *operands, **kwargs)
    return promoted


def _add(d, other, alpha=1):
    np.add(d, other if alpha == 1 else np.multiply(other, alpha), out=d)


def _sub(d, other, alpha=1):
    np.subtract(d, other if alpha == 1 else np.multiply(other, alpha), out=d)


def _mul(d, other):
    np.multiply(d, other, out=d)


def _div(d, other):
    np.true_divide(d, other, out=d)


def _copy(d, src):
    np.copyto(d, src, casting="unsafe")  # PyTorch's copy_ converts any dtype into any


def _array(a) -> np.ndarray:
    """A ufunc's result as an array to write into (0-d operands give a numpy scalar)."""
    return a if type(a) is np.ndarray else np.asarray(a)


def _addcmul(d, t1, t2, value=1):
    prod = _array(np.multiply(t1, t2))  # one temporary (PyTorch's addcmul_ fuses it away)
    if value != 1:
        np.multiply(prod, value, out=prod)
    np.add(d, prod, out=d)


def _lerp(d, end, weight):
    step = _array(np.subtract(end, d))  # one temporary: d + weight * (end - d)
    np.multiply(step, weight, out=step)
    np.add(d, step, out=d)


def _clamp(d, min=None, max=None):
    if min is None and max is None:
        raise ValueError("at least one of min and max must be given")
    np.clip(d, min, max, out=d)


# ---- the index writes: PyTorch's scatter_, scatter_add_, index_add_, index_fill_,
# masked_fill_; validated as their out-of-place ops are, before anything is written; they
# write into the tensor's memory (index arrays aside, no temporaries)
def _scatter(d, dim, index, src=None, value=None):
    if src is not None and value is not None:
        raise TypeError("give src or value, not both")
    if src is not None and np.ndim(src) == 0 and not isinstance(src, np.ndarray):
        src, value = None, src  # scatter_(dim, index, 2.0): PyTorch's value overload
    if src is None and value is None:
        raise TypeError("src or value is required")
    idx, k = IX.indices(index, "scatter_"), IX.old_dim(dim, d.ndim, "scatter_")
    if src is None:
        if np.ndim(value):
            raise TypeError("value must be a number (use src= for a tensor)")
        IX.check_index(d, k, idx, "scatter_")
        d[IX.grid(idx, k)] = value
        return
    s = np.asarray(src)
    IX.same_dtype("scatter", d, s)  # PyTorch's: src is not converted
    IX.check_index(d, k, idx, "scatter_", s)
    d[IX.grid(idx, k)] = s[IX.lead(idx.shape)]  # repeats: the last write wins


def _scatter_add(d, dim, index, src):
    s = np.asarray(src)
    IX.same_dtype("scatter", d, s)
    idx, k = IX.indices(index, "scatter_add_"), IX.old_dim(dim, d.ndim, "scatter_add_")
    IX.check_index(d, k, idx, "scatter_add_", s)
    np.add.at(d, IX.grid(idx, k), s[IX.lead(idx.shape)])  # repeats accumulate


def _index_add(d, dim, index, source, alpha=1):
    if d.ndim == 0:
        raise ValueError("input must have at least 1 dimension")
    k = IX.old_dim(dim, d.ndim, "index_add_")
    idx = IX.vector_index(index, d.shape[k], "index_add_", k)
    s = np.asarray(source)
    if s.dtype != d.dtype:
        raise RuntimeError(f"index_add_(): self ({scalar_type_name(d.dtype)}) and source "
                           f"({scalar_type_name(s.dtype)}) must have the same scalar type")
    want = d.shape[:k] + idx.shape + d.shape[k + 1:]
    if s.shape != want:
        raise ValueError(f"source must have shape {want} (input's, with len(index) in dim "
                         f"{k}), got {s.shape}")
    np.add.at(d, IX.along(k, idx), s if alpha == 1 else s * alpha)


def _index_fill(d, dim, index, value):
    if d.ndim == 0:
        raise ValueError("input must have at least 1 dimension")
    if np.ndim(value):
        raise ValueError("value must be a number or a 0-d tensor")
    k = IX.old_dim(dim, d.ndim, "index_fill_")
    d[IX.along(k, IX.vector_index(index, d.shape[k], "index_fill_", k))] = value


def _masked_fill(d, mask, value):
    m = IX.mask(mask, "masked_fill_")
    if np.ndim(value):
        raise ValueError("value must be a number or a 0-d tensor")
    try:
        if np.broadcast_shapes(m.shape, d.shape) != d.shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"mask of shape {m.shape} does not broadcast to the tensor's shape "
                         f"{d.shape}") from None
    np.copyto(d, value, where=m)


def _copied(old, src):
    """`copy_`'s recorded form: `src` (broadcast, cast) written over all of `old`."""
    return index_put(old, Ellipsis, src)


def _filled(old, value):
    return index_put(old, Ellipsis, value)


def _zeroed(old):
    return index_put(old, Ellipsis, 0)


METHODS = {
    "add_": _inplace("add_", _promoting("add_", _add), PW.add),
    "sub_": _inplace("sub_", _promoting("sub_", _sub), PW.sub),
    "mul_": _inplace("mul_", _promoting("mul_", _mul), PW.mul),
    "div_": _inplace("div_", _promoting("div_", _div, to_float=True), PW.div),
    "neg_": _inplace("neg_", lambda d: np.negative(d, out=d), PW.neg),
    "zero_": _inplace("zero_", lambda d: d.fill(0), _zeroed),
    "fill_": _inplace("fill_", lambda d, value: d.fill(value), _filled),
    "copy_": _inplace("copy_", _copy, _copied),
    "clamp_": _inplace("clamp_", _promoting("clamp_", _clamp, 2), PW.clamp),
    "addcmul_": _inplace("addcmul_", _promoting("addcmul_", _addcmul, 2), PW.addcmul),
    "lerp_": _inplace("lerp_", _lerp, PW.lerp),
    "__iadd__": _inplace("+=", _promoting("+=", _add), PW.add),
    "__isub__": _inplace("-=", _promoting("-=", _sub), PW.sub),
    "__imul__": _inplace("*=", _promoting("*=", _mul), PW.mul),
    "__itruediv__": _inplace("/=", _promoting("/=", _div, to_float=True), PW.div),
    "scatter_": _inplace("scatter_", _scatter, IX.scatter),
    "scatter_add_": _inplace("scatter_add_", _scatter_add, IX.scatter_add),
    "index_add_": _inplace("index_add_", _index_add, IX.index_add),
    "index_fill_": _inplace("index_fill_", _index_fill),
    "masked_fill_": _inplace("masked_fill_", _masked_fill, IX.masked_fill),
}
METHODS["clip_"] = METHODS["clamp_"]
METHODS["__setitem__"] = setitem


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
def _reshaping(name: str, view, recorded):
    """An in-place shape method: `view(data, *args)` is the tensor's new array; with a
    history, `recorded(t, *args)` (the shape op) gives its node (`record.rebase_view`)."""
    def method(self: Tensor, *args) -> Tensor:
        if _records(self, name, ()):
            return rebase_view(self, name, recorded, args)
        self._data = view(self._data, *args)
        version.bump(self)
        return self

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: the tensor becomes `{name[:-1]}`'s view of its memory."
    return method


def _unsqueeze(d, dim):
    return np.expand_dims(d, IX.old_dim(dim, d.ndim + 1, "unsqueeze_"))


def _squeeze(d, dim=None):
    if d.ndim == 0:
        return d
    dims = range(d.ndim) if dim is None else IX.old_dims(dim, d.ndim, "squeeze_")
    return np.squeeze(d, axis=tuple(k for k in dims if d.shape[k] == 1))  # others: kept


def _transpose(d, dim0, dim1):
    return np.swapaxes(d, IX.old_dim(dim0, d.ndim, "transpose_"), IX.old_dim(dim1, d.ndim,
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
    if d.dtype.kind == "c":  # (PyTorch's kernel: every real dtype, bool included)
        raise not_implemented("bernoulli", d.dtype)
    p = _probabilities(p)
    _store(d, resolve_generator(generator).random(d.shape) < np.broadcast_to(p, d.shape))


def bernoulli(input, p=None, *, generator=None) -> Tensor:
    """0 or 1 (input's dtype) drawn elementwise with probability `input` (or `p`, a number,
    for every element); the gradient is 0 (PyTorch's)."""
    x = input._data if isinstance(input, Tensor) else np.asarray(input)
    if x.dtype.kind == "c" or (p is None and x.dtype.kind != "f"):  # PyTorch's kernels
        raise not_implemented("bernoulli", x.dtype)
    prob = _probabilities(x if p is None else (p._data if isinstance(p, Tensor) else p),
                          "bernoulli: ")
    draw = resolve_generator(generator).random(x.shape) < np.broadcast_to(prob, x.shape)
    out = depends_on(draw.astype(x.dtype), input)
    return out if isinstance(out, Tensor) else Tensor._wrap(out)


METHODS.update({name: _inplace(name, write, getattr(AC if name[:-1] in ("relu", "sigmoid")
                                                   else PW, name[:-1]))
                for name, write in _MATH.items()})
def _drawn(write):
    """The recorded form of a random fill: the draw written over all of the old values
    (PyTorch's: their gradient is 0)."""
    def recorded(old, *args, **kwargs):
        values = np.empty(old.shape, old.dtype)
        write(values, *args, **kwargs)
        return index_put(old, Ellipsis, values)
    return recorded


def _index_filled(old, dim, index, value):
    """`index_fill_`'s recorded form: `value` written at `index` along `dim`."""
    d = old._data
    if d.ndim == 0:
        raise ValueError("index_fill_: input must have at least 1 dimension")
    k = IX.old_dim(dim, d.ndim, "index_fill_")
    if np.ndim(_raw(value)):
        raise ValueError("index_fill_: value must be a number or a 0-d tensor")
    return index_put(old, IX.along(k, IX.vector_index(index, d.shape[k], "index_fill_", k)),
                     value)


METHODS["index_fill_"] = _inplace("index_fill_", _index_fill, _index_filled)
METHODS.update({
    "unsqueeze_": _reshaping("unsqueeze_", _unsqueeze, S.unsqueeze),
    "squeeze_": _reshaping("squeeze_", _squeeze, S.squeeze),
    "transpose_": _reshaping("transpose_", _transpose, S.transpose),
    "swapaxes_": _reshaping("swapaxes_", _transpose, S.swapaxes),
    "t_": _reshaping("t_", _t, S.t),
    "uniform_": _inplace("uniform_", _uniform, _drawn(_uniform)),
    "normal_": _inplace("normal_", _normal, _drawn(_normal)),
    "bernoulli_": _inplace("bernoulli_", _bernoulli, _drawn(_bernoulli)),
    "bernoulli": bernoulli,
})
for _name in _MATH:
    METHODS[_name].__doc__ = f"`{_name[:-1]}` in place (the tensor's own memory is written)."


def inplace_form(op):
    """`op` with PyTorch's `inplace=True`: `F.relu(x, inplace=True)` writes the result into
    `x` and returns `x` (recorded through `op`'s node when grad is involved, as the
    in-place methods are: `record.rebase`; a leaf that requires grad is refused, a view of
    another tensor with history too), instead of computing out of place and leaving `x`
    unchanged. `op` is a declared op with an `inplace` parameter it ignores. A dropout
    that is the identity (`training=False` or `p=0`) returns `x` untouched, as PyTorch's.
    The signature shown is `op`'s (`__wrapped__`)."""
    name = op.__name__ + "_"
    sig = inspect.signature(op)
    pos = list(sig.parameters).index("inplace")
    identity = None
    if "training" in sig.parameters and "p" in sig.parameters:  # the dropouts
        def identity(args, kwargs):
            b = sig.bind_partial(*args, **kwargs)
            b.apply_defaults()
            return not b.arguments["training"] or b.arguments["p"] == 0

    @functools.wraps(op)
    def f(*args, **kwargs):
        if len(args) > pos:
            inplace, args = args[pos], args[:pos] + args[pos + 1:]
        else:
            inplace = kwargs.pop("inplace", False)
        if not inplace or (identity is not None and identity(args, kwargs)):
            return op(*args, **kwargs)
        if args:
            t, operands = args[0], args[1:]
        else:
            t, operands = kwargs.pop("input"), ()
        if not isinstance(t, Tensor):
            raise TypeError(f"{op.__name__}(inplace=True): the input must be a Tensor, got "
                            f"{type(t).__name__}")
        if _records(t, name, operands + tuple(kwargs.values())):
            return rebase(t, name, op, operands, kwargs)
        out = op(t, *operands, **kwargs)
        np.copyto(t._data, out._data, casting="same_kind")
        version.bump(t)
        return t

    return f
