"""Linear maps of `torch.nn.functional`: linear and bilinear, one declaration each.

linear is one node: one GEMM over all leading dimensions of the input (a batch of rows,
not a batch of products), the bias added in place; its kernels are one GEMM each (the
bias's one reduction) and the node keeps the input and the weight, not the output. Its
formulas are the same products written with ops (differentiable again: the second
derivative of a linear map is again linear maps, so every order runs GEMMs).

bilinear is a composite (PyTorch's own formula, `x1^T A_k x2 + b_k` per output k): two
GEMMs through a recorded `linear` and a product.

Thread safety: pure functions of their arguments, like every op.
"""
from __future__ import annotations

import math

import numpy as np

from .. import memory
from ..costs import gemm_cost
from ..engine import blas
from ..ops import reduce as R
from ..ops import shape as S
from ..ops._common import array, reshaped
from ..ops.forms import expand_to
from ..ops.linalg import matmul
from ..primitive import composite, defop
from ..tensor import Tensor

__all__ = ["linear", "bilinear"]


def _shape(x) -> tuple:
    return np.shape(array(x))


def _rows(shape: tuple) -> int:
    return math.prod(shape[:-1])


def _blas_threads(m: int, k: int, n: int):
    """The context linear's (m, k) @ (k, n) GEMM runs in: BLAS held at one thread from
    2^19 to 2^25 multiply-adds (`blas.one_thread`: on 2 loaded cores the threaded call
    took 50-850x the one-thread time for Linear's usual 1-19M, ~60 us a switch when it
    changes the count, ~10 us in a parallel backward's workers). Shapes only (both
    engines bitwise equal)."""
    return blas.one_thread(m * k * n)


def _check(x: np.ndarray, w: np.ndarray, b) -> None:
    """PyTorch's RuntimeErrors: shapes that cannot be multiplied, dtypes that differ."""
    if not x.shape or w.shape[-1:] != x.shape[-1:] or w.ndim not in (1, 2):
        raise RuntimeError(f"linear: input of shape {x.shape} does not match weight of "
                           f"shape {w.shape} (out_features, in_features): mat1 and mat2 "
                           f"shapes cannot be multiplied")
    for what, a in (("weight", w), ("bias", b)):
        if a is not None and a.dtype != x.dtype:
            raise RuntimeError(f"linear: expected the input and the {what} to have the "
                               f"same dtype, but got {x.dtype} and {a.dtype}")


# ---- the derivative: formulas (ops) and kernels (numpy, one GEMM each) ---------------------
def _input_formula(g, ans, input, weight, bias):
    if np.ndim(array(weight)) == 1:
        return S.unsqueeze(g, -1) * weight
    return matmul(g, weight)


def _input_rows(input, lead: tuple):
    """The input seen with the gradient's leading dimensions `lead` (a bias may broadcast
    the output beyond the input's), as (rows, in_features)."""
    shape = _shape(input)
    if shape[:-1] != lead:
        input = expand_to(input, lead + shape[-1:])
    return S.reshape(input, (math.prod(lead), shape[-1]))


def _weight_formula(g, ans, input, weight, bias):
    gs = _shape(g)
    if np.ndim(array(weight)) == 1:
        return matmul(S.reshape(g, (math.prod(gs),)), _input_rows(input, gs))
    return matmul(S.swapaxes(S.reshape(g, (_rows(gs), gs[-1])), 0, 1),
                  _input_rows(input, gs[:-1]))


def _bias_formula(g, ans, input, weight, bias):
    return g  # summed back to the bias's shape by the node (and by `graph_fit`)


def _input_kernel(g, ans, input, weight, bias):
    # g @ W as one GEMM over all leading dimensions: one pass writing the result
    if weight.ndim == 1:
        out = memory.empty(g.shape + weight.shape, np.result_type(g, weight))
        return np.multiply(g[..., None], weight, out=out)
    rows = _rows(g.shape)
    with _blas_threads(rows, *weight.shape):
        out = memory.matmul(reshaped(g, (rows, weight.shape[0])), weight)
    return out.reshape(g.shape[:-1] + weight.shape[1:])


def _weight_kernel(g, ans, input, weight, bias):
    # g^T @ x as one GEMM reading g and x once, already (out_features, in_features): no
    # transposed copy (a copy of x only where a bias broadcast the output beyond it)
    lead = g.shape if weight.ndim == 1 else g.shape[:-1]
    x = input if input.shape[:-1] == lead else np.broadcast_to(input, lead + input.shape[-1:])
    x2 = reshaped(x, (math.prod(lead), x.shape[-1]))
    if weight.ndim == 1:
        return memory.matmul(reshaped(g, (x2.shape[0],)), x2)
    with _blas_threads(*x2.shape, g.shape[-1]):
        return memory.matmul(reshaped(g, (x2.shape[0], g.shape[-1])).T, x2)


def _cost(ans, input, weight, bias):
    return gemm_cost(ans.size, input.shape[-1])


@defop(dtypes="numeric", inputs=("input", "weight", "bias"),
       formula=(_input_formula, _weight_formula, _bias_formula),
       kernel=(_input_kernel, _weight_kernel, None), unsaved=("result",),
       module="torch.nn.functional", cost=_cost, threaded=True)
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`input @ weight.T + bias`: weight (out_features, in_features) or (in_features,),
    bias broadcasting against the output (PyTorch refuses a bias that makes the output
    larger; here the output takes the broadcast shape, numpy's rule).

    One GEMM over all leading dimensions of the input, the bias added in place; the
    gradients are one GEMM each (a reduction for the bias). Shapes that do not fit and
    dtypes that differ are RuntimeErrors, as PyTorch's.
    """
    x, w = np.asarray(input), np.asarray(weight)
    b = None if bias is None else np.asarray(bias)
    _check(x, w, b)
    out_shape = x.shape[:-1] + w.shape[:-1]
    rows = _rows(x.shape)
    with _blas_threads(rows, x.shape[-1], math.prod(w.shape[:-1]) if w.ndim > 1 else 0):
        y = memory.matmul(reshaped(x, (rows, x.shape[-1])),
                          reshaped(w, (math.prod(w.shape[:-1]), x.shape[-1])).T)
    y = y.reshape(out_shape)
    if b is None:
        return y
    try:
        grown = np.broadcast_shapes(out_shape, b.shape)
    except ValueError:
        raise RuntimeError(f"linear: bias of shape {b.shape} does not broadcast against "
                           f"the output's shape {out_shape}") from None
    if grown == out_shape:
        y += b                                       # in place: no second array
        return y
    return y + b              # the bias broadcasts the output up (PyTorch refuses this)


@composite(dtypes="numeric", module="torch.nn.functional")
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor,
             bias: Tensor | None = None) -> Tensor:
    """`y_k = x1^T A_k x2 + b_k` over the last dimensions: input1 (..., in1), input2 (...,
    in2) with the same leading dimensions, weight (out, in1, in2), bias (out,). Composed
    of ops: one GEMM of x1 against the weight, a product with x2 and a sum."""
    x1, x2, w = _shape(input1), _shape(input2), _shape(weight)
    if len(w) != 3 or not x1 or not x2 or x1[:-1] != x2[:-1] or x1[-1] != w[1] \
            or x2[-1] != w[2]:
        raise RuntimeError(f"bilinear: input1 {x1} and input2 {x2} must have the same "
                           f"leading dimensions and last dimensions matching the weight "
                           f"{w} (out_features, in1_features, in2_features)")
    if bias is not None and _shape(bias) != w[:1]:
        raise RuntimeError(f"bilinear: bias shape {_shape(bias)} must be ({w[0]},)")
    # (..., in1) @ (in1, out * in2) -> (..., out, in2), times x2, summed over in2
    a = S.reshape(S.permute(weight, (1, 0, 2)), (w[1], w[0] * w[2]))
    t = S.reshape(matmul(input1, a), x1[:-1] + (w[0], w[2]))
    y = R.sum(t * S.unsqueeze(input2, -2), -1)
    return y if bias is None else y + bias
