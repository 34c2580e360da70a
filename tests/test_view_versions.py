"""Views share their version counter with what they view: the op walk (issue 25, item 1).

A tensor whose memory is (or is inside) another tensor's memory must share that tensor's
version counter, or an in-place write through one of them goes unnoticed by a graph that
saved the other, and backward silently computes with the new values (`x.squeeze()` that
removed nothing returned x's array with a fresh counter: `w.grad` came out [10, 20, 30]
for a forward that used [1, 2, 3]). PyTorch raises "one of the variables needed for
gradient computation has been modified by an inplace operation".

The walk (`opwalk.CASES`, every op of pa, Tensor, nn.functional and linalg) applies each
op to inputs that need no grad (contiguous, strided views, 0-d), and checks:
- every result that shares memory with an input (or with another result) shares its
  version counter, and a result with an input's counter does share its memory;
- behaviourally, for every pair of them, a graph that saved one, then a write in place
  through the other: backward either raises the version error or gives the gradient of
  the values the forward saw (never other values);
- a result aliases an input exactly when PyTorch's does, so a write through it reaches
  the input exactly when it does in PyTorch.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import opwalk as W
import parallel_autograd as pa
from opwalk import torch

VARIANTS = ("contiguous", "strided", "0-d")
VERSION_ERROR = "modified by an inplace operation"
P = W.Lib("pa")

# every case in every form it has (cases without a tensor result run too: the walk
# stays complete)
# The op walk: thousands of small cases, interpreter-independent; `-m "not walk"` leaves
# them out (.ci/run does for the extra CPython versions; the parity run has them all).
pytestmark = pytest.mark.walk

PARAMS = [pytest.param(c, f, id=f"{c.id}-{f}") for c in W.CASES for f in W.forms(c)]
# aliases that do not share the counter, on purpose (PyTorch's): `.data` is the same memory
# with a counter of its own, so writes through it are not tracked (tests/test_tensor_data.py)
OWN_COUNTER = {"data"}


def test_the_walk_covers_every_op():
    assert W.uncovered() == {}, "ops without a case in tests/opwalk.py"
    assert len(W.SKIP) <= 30


def _strided(t: pa.Tensor) -> pa.Tensor:
    """`t`'s values as a non-contiguous view (every other element of a wider tensor)."""
    if t.ndim == 0:
        return t
    big = np.zeros(t.shape[:-1] + (2 * t.shape[-1],), t.dtype)
    big[..., ::2] = t.numpy()
    return pa.tensor(big)[..., ::2]


def _inputs(case: W.Case, variant: str) -> list | None:
    arrays = W.make_arrays(case)
    if variant == "0-d":
        if not arrays or any(a.size == 0 for a in arrays):
            return None
        arrays = [a.reshape(-1)[:1].reshape(()) for a in arrays]
    ins = [P.t(a) for a in arrays]
    return [_strided(t) for t in ins] if variant == "strided" else ins


def _run(case: W.Case, form: str, variant: str):
    """(inputs, results) or None when the op refuses this variant (0-d, strided)."""
    ins = _inputs(case, variant)
    if ins is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = W.call(case, form, P, ins)
        except Exception:
            if variant == "contiguous":
                raise  # the case itself is wrong
            return None
    return ins, [t for t in W.tensors_of(out) if isinstance(t, pa.Tensor)]


def _numeric(t: pa.Tensor) -> bool:
    return t.dtype.kind in "fiu" and t.numel() > 0


def _same_root(a: np.ndarray, b: np.ndarray) -> bool:
    ra = a if a.base is None else a.base
    rb = b if b.base is None else b.base
    return ra is rb or np.may_share_memory(a, b)


@pytest.mark.parametrize("case,form", PARAMS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_aliases_share_the_version_counter(case, form, variant):
    if case.name in OWN_COUNTER:
        return
    run = _run(case, form, variant)
    if run is None:
        return
    ins, outs = run
    for k, o in enumerate(outs):
        for name, others in (("input", ins), ("result", outs[:k])):
            for i, x in enumerate(others):
                if o.numel() and x.numel() and np.shares_memory(o.numpy(), x.numpy()):
                    assert o._vc is x._vc, (
                        f"result {k} shares memory with {name} {i} but not its version "
                        f"counter")
                elif o._vc is x._vc and o.numel() and x.numel():
                    assert _same_root(o.numpy(), x.numpy()), (
                        f"result {k} has {name} {i}'s version counter without sharing "
                        f"its memory (a write to one would fail the other's backward)")


def _targets(case: W.Case, form: str, variant: str) -> list:
    run = _run(case, form, variant)
    if run is None:
        return []
    ins, outs = run
    return [i for i, t in enumerate(ins + outs) if _numeric(t)]


def _write_then_backward(case: W.Case, form: str, variant: str, saved: int,
                         target: int) -> None:
    """A graph that saved tensor `saved` alone; a write through tensor `target`; then
    backward must raise the version error or use the values the forward saw."""
    ins, outs = _run(case, form, variant)
    tensors = ins + outs
    t = tensors[saved]
    w = pa.ones(t.shape, requires_grad=True)
    want = t.numpy().astype(np.float64)  # a copy: astype copies
    loss = (t * w).sum()
    try:
        tensors[target].add_(1)
    except (ValueError, TypeError, RuntimeError):
        return  # a read-only view (broadcast, expand, diagonal) refuses the write
    try:
        loss.backward()
    except RuntimeError as e:
        assert VERSION_ERROR in str(e), e
        return
    np.testing.assert_array_equal(w.grad, want, err_msg=(
        f"silent wrong gradient: after a write through tensor {target}, the gradient of "
        f"a graph that saved tensor {saved} used values the forward did not see"))


@pytest.mark.parametrize("case,form", PARAMS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_write_through_any_alias_is_detected(case, form, variant):
    if case.name in OWN_COUNTER:
        return
    numeric = _targets(case, form, variant)
    for saved in numeric:
        for target in numeric:
            _write_then_backward(case, form, variant, saved, target)


def test_the_issue_reproduction():
    x = pa.tensor([1.0, 2, 3])
    w = pa.tensor([1.0, 1, 1], requires_grad=True)
    loss = (x.squeeze() * w).sum()
    x.mul_(10.0)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        loss.backward()
    # and writing through the squeezed tensor
    x = pa.tensor([1.0, 2, 3])
    loss = (x * w).sum()
    x.squeeze().mul_(10.0)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        loss.backward()


def test_user_ops_returning_their_input():
    """A primitive or Function whose forward returns its input array (or a view of it):
    the result shares the input's counter, so a later write to either is detected."""
    ident = pa.primitive("ident", lambda a: a, lambda g, ans, a: g)
    for make in (ident, W._Identity.apply, lambda t: W._Identity.apply(t[1:])):
        x = pa.tensor([1.0, 2, 3])
        w = pa.ones(make(x).shape, requires_grad=True)
        loss = (make(x) * w).sum()
        x.add_(1)
        with pytest.raises(RuntimeError, match=VERSION_ERROR):
            loss.backward()


def _torch_strided(t):
    if t.ndim == 0:
        return t
    big = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    big[..., ::2] = t
    return big[..., ::2]


@pytest.mark.parametrize("case,form", PARAMS)
@pytest.mark.parametrize("variant", ("contiguous", "strided"))
def test_results_alias_their_inputs_as_in_pytorch(case, form, variant):
    """A write through a result reaches an input exactly when it does in PyTorch: a
    result is a view where PyTorch's is, and a copy where PyTorch's is (`diag` of a
    matrix copied, `diagonal` views). numpy's read-only views (broadcast_to, expand) refuse
    the write PyTorch allows: a clear error, not a different value."""
    if torch is None:
        pytest.skip("PyTorch is the oracle")
    run = _run(case, form, variant)
    if run is None:
        return
    ins, outs = run
    T = W.Lib("torch")
    tins = [T.t(x.numpy()) for x in ins]
    if variant == "strided":
        tins = [_torch_strided(t) for t in tins]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            touts = W.tensors_of(W.call(case, form, T, tins))
        except Exception:  # torch lacks the name or the form: nothing to compare with
            return
    for k, (o, to) in enumerate(zip(outs, touts)):
        for i, (x, tx) in enumerate(zip(ins, tins)):
            if not (o.numel() and x.numel()) or not isinstance(to, torch.Tensor):
                continue
            ours = np.shares_memory(o.numpy(), x.numpy())
            theirs = to.untyped_storage().data_ptr() == tx.untyped_storage().data_ptr()
            assert ours == theirs, (
                f"result {k} {'aliases' if ours else 'copies'} input {i} where PyTorch's "
                f"{'aliases' if theirs else 'copies'} it")


def test_functional_api_outputs_share_counters():
    """`autograd.functional.vjp`'s detached output of a function that returns a tensor it
    captured is that tensor's memory: it shares its counter, as `detach()` does."""
    y = pa.tensor([1.0, 2, 3])
    out, _ = pa.autograd.functional.vjp(lambda x: y, pa.tensor([0.0, 0, 0]),
                                        pa.tensor([1.0, 1, 1]))
    w = pa.ones(3, requires_grad=True)
    loss = (out * w).sum()
    y.mul_(10.0)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        loss.backward()
