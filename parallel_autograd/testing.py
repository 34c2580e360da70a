"""Gradient checking for users' own ops, the same way the test suite checks ours."""
from __future__ import annotations

import numpy as np

from .engine.sequential import grad
from .tensor import Tensor


def numerical_grad(fn, inputs, eps: float = 1e-6, seed_grad=None, wrt=None) -> list:
    """Central finite differences of sum(fn(*inputs) * seed_grad) w.r.t. each input, or
    only the inputs at the positions `wrt` (the others, e.g. integer indices, are left
    as they are)."""
    datas = [inputs[i].data for i in (range(len(inputs)) if wrt is None else wrt)]
    out = fn(*inputs).data
    w = np.ones_like(out) if seed_grad is None else seed_grad
    result = []
    for x in datas:
        g = np.zeros(x.shape, dtype=np.float64)
        # Index x itself (not x.reshape(-1), a copy for non-C-contiguous data, where
        # the perturbation would be lost): we perturb in place and restore.
        for i in np.ndindex(x.shape):
            old = x[i]
            x[i] = old + eps
            hi = float(np.sum(fn(*inputs).data * w))
            x[i] = old - eps
            lo = float(np.sum(fn(*inputs).data * w))
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
    inputs = [t if isinstance(t, Tensor) else Tensor(t) for t in inputs]
    checked = [t for t in inputs if t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad")
    for t in checked:
        if t.dtype != np.float64:
            raise TypeError(f"gradcheck needs float64 inputs, got {t.dtype}")
    out = fn(*inputs)
    w = np.random.default_rng(seed).uniform(0.5, 1.5, size=out.shape)
    analytic = grad(out, checked, grad_outputs=w.astype(out.dtype), allow_unused=True)
    # only the checked inputs are perturbed: others may be integer indices or masks
    numeric = numerical_grad(lambda *a: fn(*a), inputs, eps, w,
                             wrt=[i for i, t in enumerate(inputs) if t.requires_grad])
    for k, (a, n) in enumerate(zip(analytic, numeric)):
        a = np.zeros_like(n) if a is None else a
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
    from .ops.shape import concat, reshape  # late: the ops import the package's core

    inputs = [t if isinstance(t, Tensor) else Tensor(t) for t in inputs]
    out = fn(*inputs)
    if grad_outputs is None:
        v = np.random.default_rng(seed + 1).uniform(0.5, 1.5, size=out.shape)
        grad_outputs = Tensor(v.astype(out.dtype), requires_grad=True)
    elif not isinstance(grad_outputs, Tensor):
        grad_outputs = Tensor(np.asarray(grad_outputs, out.dtype), requires_grad=True)
    n = len(inputs)
    # the recorded first-order gradients must equal the fast rules' (same inputs)
    checked = [x for x in inputs if x.requires_grad]
    fast = grad(fn(*inputs), checked, grad_outputs=grad_outputs.data, allow_unused=True)
    slow = grad(fn(*inputs), checked, grad_outputs=grad_outputs, create_graph=True,
                allow_unused=True)
    for k, (a, b) in enumerate(zip(fast, slow)):
        if (a is None) != (b is None) or (a is not None and
                                          not np.allclose(a, b.data, atol=atol, rtol=rtol)):
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
