"""Testing helpers: gradient checking for users' own ops (the way the test suite checks
ours), and `assert_close`, PyTorch's `torch.testing.assert_close`."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from . import dtypes as D
from .engine.sequential import grad
from .ops.shape import concat, reshape
from .tensor import Tensor, tensor


def numerical_grad(fn, inputs, eps: float = 1e-6, seed_grad=None, wrt=None) -> list:
    """Central finite differences of sum(fn(*inputs) * seed_grad) w.r.t. each input, or
    only the inputs at the positions `wrt` (the others, e.g. integer indices, are left
    as they are)."""
    datas = [inputs[i]._data for i in (range(len(inputs)) if wrt is None else wrt)]
    out = fn(*inputs)._data
    w = np.ones_like(out) if seed_grad is None else seed_grad
    result = []
    for x in datas:
        g = np.zeros(x.shape, dtype=np.float64)
        # Index x itself (not x.reshape(-1), a copy for non-C-contiguous data, where
        # the perturbation would be lost): we perturb in place and restore.
        for i in np.ndindex(x.shape):
            old = x[i]
            x[i] = old + eps
            hi = float(np.sum(fn(*inputs)._data * w))
            x[i] = old - eps
            lo = float(np.sum(fn(*inputs)._data * w))
            x[i] = old
            g[i] = (hi - lo) / (2 * eps)
        result.append(g)
    return result


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-4,
              seed: int = 0) -> bool:
    """Compare the engine's gradients of `fn(*inputs)` with finite differences.

    `inputs` are float64 tensors (those with requires_grad are checked). The output
    may have any shape: it is contracted with a fixed random weight. Returns True,
    or raises AssertionError naming the input and the worst element.
    """
    inputs = [t if isinstance(t, Tensor) else tensor(t) for t in inputs]
    checked = [t for t in inputs if t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad")
    for t in checked:
        if t.dtype != np.float64:
            raise TypeError(f"gradcheck needs float64 inputs, got {t.dtype} (make them with "
                            f"dtype=pa.float64, or pa.set_default_dtype(pa.float64) first: "
                            f"the default dtype is float32)")
    out = fn(*inputs)
    w = np.random.default_rng(seed).uniform(0.5, 1.5, size=out.shape)
    analytic = grad(out, checked, grad_outputs=w.astype(out.dtype), allow_unused=True)
    # only the checked inputs are perturbed: others may be integer indices or masks
    numeric = numerical_grad(lambda *a: fn(*a), inputs, eps, w,
                             wrt=[i for i, t in enumerate(inputs) if t.requires_grad])
    for k, (a, n) in enumerate(zip(analytic, numeric)):
        a = np.zeros_like(n) if a is None else np.asarray(a)
        if a.shape != n.shape:
            raise AssertionError(f"gradcheck: input {k}: gradient shape {a.shape}, "
                                 f"expected {n.shape}")
        if not np.allclose(a, n, atol=atol, rtol=rtol):
            i = np.unravel_index(np.argmax(np.abs(a - n)), a.shape)
            raise AssertionError(f"gradcheck: input {k}: analytic {a[i]} vs numeric {n[i]} "
                                 f"at index {i} (max abs diff {np.max(np.abs(a - n)):.3g})")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-4, seed: int = 0) -> bool:
    """Check second derivatives: `gradcheck` of the first-order gradients of `fn`.

    The gradients of `fn(*inputs)` contracted with `grad_outputs` (random, from `seed`,
    when None) are computed with `create_graph=True`, and their own gradients with
    respect to the inputs and to `grad_outputs` are compared with finite differences,
    as PyTorch's gradgradcheck does. Returns True or raises AssertionError.
    """
    inputs = [t if isinstance(t, Tensor) else tensor(t) for t in inputs]
    out = fn(*inputs)
    if grad_outputs is None:
        v = np.random.default_rng(seed + 1).uniform(0.5, 1.5, size=out.shape)
        grad_outputs = Tensor(v.astype(out.dtype), requires_grad=True)
    elif not isinstance(grad_outputs, Tensor):
        grad_outputs = Tensor(np.asarray(grad_outputs, out.dtype), requires_grad=True)
    n = len(inputs)
    # the recorded first-order gradients must equal the fast rules' (same inputs)
    checked = [x for x in inputs if x.requires_grad]
    fast = grad(fn(*inputs), checked, grad_outputs=grad_outputs._data, allow_unused=True)
    slow = grad(fn(*inputs), checked, grad_outputs=grad_outputs, create_graph=True,
                allow_unused=True)
    for k, (a, b) in enumerate(zip(fast, slow)):
        if (a is None) != (b is None) or (a is not None and
                                          not np.allclose(a, b._data, atol=atol, rtol=rtol)):
            raise AssertionError(f"gradgradcheck: input {k}: the differentiable form's "
                                 "first-order gradient differs from the fast rule's")

    def first_order(*args):
        xs, v = args[:n], args[n]
        checked = [x for x in xs if x.requires_grad]
        gs = grad(fn(*xs), checked, grad_outputs=v, create_graph=True, allow_unused=True)
        parts = [reshape(g, (-1,)) for g in gs if g is not None]
        if not parts:
            raise ValueError("gradgradcheck: fn does not depend on any input")
        return concat(parts)

    return gradcheck(first_order, [*inputs, grad_outputs], eps, atol, rtol, seed)


# ---- assert_close (torch.testing.assert_close) ---------------------------------------------------
# default (rtol, atol) by dtype, torch's table; other dtypes (integers, bool) compare equal
_PRECISIONS = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
               np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.complex64): (1.3e-6, 1e-5),
               np.dtype(np.complex128): (1e-7, 1e-7)}


class _Mismatch(Exception):
    """A failed comparison: the exception type to raise and its message."""

    def __init__(self, kind: type, msg: str, path: tuple = ()):
        super().__init__(msg)
        self.kind, self.msg, self.path = kind, msg, path

    def error(self, custom) -> Exception:
        """The exception, torch's `ErrorMeta.to_error`: a string `custom` replaces the
        message, a callable is given it (with the failing item's path)."""
        if isinstance(custom, str):
            return self.kind(custom)
        msg = self.msg
        if self.path:
            msg += "\n\nThe failure occurred for item " + "".join(str([k]) for k in self.path)
        return self.kind(custom(msg) if callable(custom) else msg)


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False,
                 msg=None) -> None:
    """PyTorch's `torch.testing.assert_close`: raise AssertionError unless `actual` and
    `expected` are close, with torch's rules and messages.

    Tensor-likes (Tensors, or ndarrays: both the same kind; a subclass such as Parameter
    counts as a Tensor when `allow_subclasses`) must have the same shape and, if
    `check_dtype`, dtype (else both are promoted), and be elementwise close:
    `|actual - expected| <= atol + rtol * |expected|` (inf equal to itself, NaN equal to
    NaN only with `equal_nan`). Default tolerances by dtype: float16 (1e-3, 1e-5), float32
    (1.3e-6, 1e-5), float64 (1e-7, 1e-7), integers and bool exact; give both `rtol` and
    `atol` or neither. Python numbers compare as scalars (ints exactly, floats with the
    float64 tolerances, the types equal if `check_dtype`); bools must be equal; sequences
    and mappings compare item by item (the failing item's path is reported). `msg` (a
    string, or a callable given the message) replaces the message of a value mismatch.
    `check_device`/`check_layout` have nothing to check here (one device, one layout).
    TypeError for inputs that cannot be compared (a Tensor with a number, strings)."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but "
                         f"got no {'rtol' if rtol is None else 'atol'}.")
    opts = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype,
                check_stride=check_stride)
    try:      # every pair first, as torch: structure and type errors before any value
        pairs = _pairs(actual, expected, allow_subclasses)
    except _Mismatch as m:
        raise m.error(None) from None
    try:
        for path, kind, a, e in pairs:
            kind(a, e, path, opts)
    except _Mismatch as m:
        raise m.error(msg) from None


def _pairs(actual, expected, allow_subclasses: bool) -> list:
    """The leaves to compare, as (path, compare function, actual, expected), depth
    first; structure mismatches (lengths, keys) and leaves that cannot be compared raise
    as soon as they are found."""
    out, stack = [], [((), actual, expected)]
    while stack:
        path, a, e = stack.pop()
        if _is_sequence(a) and _is_sequence(e):
            if len(a) != len(e):
                raise _Mismatch(AssertionError, f"The length of the sequences mismatch: "
                                                f"{len(a)} != {len(e)}", path)
            stack.extend((path + (i,), a[i], e[i]) for i in reversed(range(len(a))))
        elif isinstance(a, Mapping) and isinstance(e, Mapping):
            if set(a) != set(e):
                raise _Mismatch(AssertionError, (
                    f"The keys of the mappings do not match:\n"
                    f"Missing keys in the actual mapping: {sorted(set(e) - set(a))}\n"
                    f"Additional keys in the actual mapping: {sorted(set(a) - set(e))}"), path)
            stack.extend((path + (k,), a[k], e[k]) for k in reversed(list(a)))
        else:
            out.append((path, _kind(a, e, path, allow_subclasses), a, e))
    return out


def _is_sequence(x) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


_BOOLS = (bool, np.bool_)


def _kind(a, e, path: tuple, allow_subclasses: bool):
    """The function comparing leaves `a` and `e` (torch's comparison pairs); TypeError
    when there is none."""
    if a is None and e is None:
        return lambda *_: None
    if isinstance(a, _BOOLS) and isinstance(e, _BOOLS):
        return _compare_bools
    if isinstance(a, numbers.Number) and isinstance(e, numbers.Number):
        return _compare_numbers
    for kind in (Tensor, np.ndarray):
        if isinstance(a, kind) and isinstance(e, kind) \
                and (allow_subclasses or type(a) is type(e)):
            return _compare_tensor_likes
    raise _Mismatch(TypeError, f"No comparison pair was able to handle inputs of type "
                               f"{type(a)} and {type(e)}.", path)


def _compare_bools(a, e, path: tuple, opts: dict) -> None:
    if bool(a) != bool(e):
        raise _Mismatch(AssertionError, f"Booleans mismatch: {a} is not {e}", path)


def _compare_tensor_likes(a, e, path: tuple, opts: dict) -> None:
    _compare_arrays(np.asarray(a._data if isinstance(a, Tensor) else a),
                    np.asarray(e._data if isinstance(e, Tensor) else e), path, opts)


def _tolerances(opts: dict, *dtypes) -> tuple:
    if opts["rtol"] is not None:
        return opts["rtol"], opts["atol"]
    tols = [_PRECISIONS.get(np.dtype(d), (0.0, 0.0)) for d in dtypes]
    return max(t[0] for t in tols), max(t[1] for t in tols)


def _number_dtype(x) -> np.dtype:
    if isinstance(x, np.generic):
        return x.dtype
    return np.dtype({int: np.int64, float: np.float64, complex: np.complex128}.get(
        type(x), np.float64 if isinstance(x, float) else np.int64))


def _compare_numbers(a, e, path: tuple, opts: dict) -> None:
    if opts["check_dtype"] and type(a) is not type(e):
        raise _Mismatch(AssertionError, f"The (d)types do not match: {type(a)} != {type(e)}.",
                        path)
    rtol, atol = _tolerances(opts, _number_dtype(a), _number_dtype(e))
    if _close(np.asarray(a), np.asarray(e), rtol, atol, opts["equal_nan"]).all():
        return
    abs_diff = abs(a - e)
    rel_diff = float("inf") if e == 0 else abs_diff / abs(e)
    raise _Mismatch(AssertionError, _message("Scalars", f"Expected {e} but got {a}.", abs_diff,
                                             None, atol, rel_diff, None, rtol), path)


def _close(a: np.ndarray, e: np.ndarray, rtol: float, atol: float, equal_nan: bool):
    if a.dtype.kind in "biu" and e.dtype.kind in "biu" and rtol == 0 and atol == 0:
        return a == e
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _compare_arrays(a: np.ndarray, e: np.ndarray, path: tuple, opts: dict) -> None:
    for attr, va, ve in (("shape", a.shape, e.shape),
                         ("dtype", a.dtype, e.dtype) if opts["check_dtype"] else (None,) * 3,
                         ("stride", _strides(a), _strides(e)) if opts["check_stride"]
                         else (None,) * 3):
        if attr is not None and va != ve:
            raise _Mismatch(AssertionError, f"The values for attribute '{attr}' do not "
                                            f"match: {va} != {ve}.", path)
    if a.dtype != e.dtype:
        common = D.to_numpy(D.promote_types(a.dtype, e.dtype))
        a, e = a.astype(common), e.astype(common)
    rtol, atol = _tolerances(opts, a.dtype, e.dtype)
    matches = _close(a, e, rtol, atol, opts["equal_nan"])
    if matches.all():
        return
    if a.ndim == 0:
        av, ev = a.item(), e.item()
        abs_diff = abs(av - ev)
        rel_diff = float("inf") if ev == 0 else abs_diff / abs(ev)
        raise _Mismatch(AssertionError, _message("Scalars", f"Expected {ev} but got {av}.",
                                                 abs_diff, None, atol, rel_diff, None, rtol),
                        path)
    raise _Mismatch(AssertionError, _array_message(a, e, matches, rtol, atol), path)


def _strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides) if a.itemsize else a.strides


def _array_message(a, e, matches, rtol: float, atol: float) -> str:
    """torch's `_make_tensor_mismatch_msg`: the count of mismatches and the greatest
    absolute and relative differences among them, with their indices."""
    n = matches.size
    bad = n - int(matches.sum())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    af, ef, mf = a.reshape(-1), e.reshape(-1), matches.reshape(-1)
    if a.dtype.kind in "biu":   # as torch: integers upcast to int64, ratios in the default dtype
        af, ef = af.astype(np.int64), ef.astype(np.int64)
    with np.errstate(all="ignore"):
        abs_diff = np.abs(af - ef)
        abs_diff[mf] = 0
        denom = np.abs(ef)
        if a.dtype.kind in "biu":
            fl = D.to_numpy(D.get_default_dtype())
            rel_diff = abs_diff.astype(fl) / denom.astype(fl)
        else:
            rel_diff = abs_diff / denom
        rel_diff[mf] = 0
    ia, ir = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
    index = lambda i: tuple(int(v) for v in np.unravel_index(i, a.shape))  # noqa: E731
    return _message("Tensor-likes", extra, abs_diff[ia].item(), index(ia), atol,
                    rel_diff[ir].item(), index(ir), rtol)


def _message(identifier: str, extra: str, abs_diff, abs_idx, atol, rel_diff, rel_idx,
             rtol) -> str:
    """torch's `_make_mismatch_msg`."""
    equality = rtol == 0 and atol == 0

    def diff(kind: str, value, idx, tol) -> str:
        line = (f"{kind.title()} difference: {value}" if idx is None
                else f"Greatest {kind} difference: {value} at index {idx}")
        return line + ("" if equality else f" (up to {tol} allowed)") + "\n"

    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n{extra.strip()}\n"
    msg += diff("absolute", abs_diff, abs_idx, atol) + diff("relative", rel_diff, rel_idx, rtol)
    return msg.strip()
