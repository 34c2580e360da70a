"""Samples of the index ops (ops/index.py; tests/op_samples.py says how samples work): index
tensors positional (they become integer tensors without gradient), the other arguments as
keywords or placed by `prep` (gather's `dim` comes before `index`); repeated indices where
the op accumulates, distinct ones where it writes (scatter: PyTorch leaves repeated writes
undefined), distinct values where a derivative is piecewise (amax/amin), zeros for prod.

`INTERNAL` holds samples of the ops the registry walk does not see (getitem and its
adjoint, scatter's two forms, diagonal_backward); tests/test_ops_index.py runs the
registry's checks on them (it did not until 2026-11-27: two samples had gone stale).
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample

try:
    import torch
except ImportError:  # the samples run on pa alone then
    torch = None

IDX_G = np.array([[0, 3, 3], [1, 0, 2]])           # gather/scatter_add along dim 1: repeats
IDX_S = np.array([[4, 0, 2], [1, 3, 0]])           # scatter along dim 1: distinct per row


def _equation(eq):
    """prep: einsum's equation before the operands."""
    return lambda a: [eq, *a]


def normal(rng, shape):
    return rng.standard_normal(shape)


def distinct(rng, shape):
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2 + 0.5) * 0.3).reshape(shape)


def _like(t, a):
    """`a` as an index of `t`'s library (torch wants tensors; pa takes arrays too)."""
    if torch is not None and isinstance(t, torch.Tensor):
        return torch.tensor(a)
    return a


def _at(dim, index, *rest):
    """prep: (input, dim, index, *tensors): the op's order when dim and index come between
    the tensors (gather, scatter_add, index_add, ...)."""
    return lambda a: [a[0], dim, _like(a[0], index), *a[1:], *rest]


def _mask(rng, shape, p=0.5):
    return rng.uniform(size=shape) > p


SAMPLES = {
    "gather": lambda rng: [
        Sample(normal(rng, (3, 4)), prep=_at(1, IDX_G)),
        Sample(normal(rng, (3, 4)), prep=_at(0, np.array([[2, 0], [2, 1], [0, 0]]))),
        Sample(normal(rng, (2, 3, 4)), prep=_at(-1, np.zeros((2, 3, 1), np.int64))),
        Sample(normal(rng, ()), prep=_at(0, np.array([0, 0])))],
    "scatter_add": lambda rng: [
        Sample(normal(rng, (3, 4)), normal(rng, (2, 3)), prep=_at(1, IDX_G)),
        Sample(normal(rng, (2, 3)), normal(rng, (1, 3)), prep=_at(0, np.array([[0, 0, 1]]))),
        Sample(normal(rng, ()), normal(rng, ()), prep=_at(0, np.array(0)))],
    "scatter_reduce": lambda rng: [
        Sample(normal(rng, (3, 4)), normal(rng, (2, 3)), prep=_at(1, IDX_G, "sum")),
        Sample(normal(rng, (3, 4)), normal(rng, (2, 3)), prep=_at(1, IDX_G, "mean"),
               include_self=False),
        Sample(normal(rng, (3, 4)), normal(rng, (2, 3)), prep=_at(1, IDX_G, "mean")),
        Sample(distinct(rng, (3, 4)), distinct(rng, (2, 3)) + 0.1, prep=_at(1, IDX_G, "amax")),
        Sample(distinct(rng, (3, 4)), distinct(rng, (1, 4)) + 0.1,
               prep=_at(0, np.array([[2, 0, 2, 1]]), "amin"), include_self=False),
        Sample(normal(rng, (3, 4)), normal(rng, (2, 3)), prep=_at(1, IDX_G, "prod")),
        Sample(np.array([[0.0, 1.5, -2.0], [0.5, 0.0, 3.0]]),
               np.array([[0.0, 2.0], [1.5, 0.0]]),  # zeros in input and src: one per element
               prep=_at(1, np.array([[0, 1], [2, 2]]), "prod")),
        Sample(normal(rng, (3, 5)), normal(rng, (2, 3)), prep=_at(1, IDX_S, "prod"),
               include_self=False)],
    "index_select": lambda rng: [
        Sample(normal(rng, (3, 4)), prep=_at(0, np.array([2, 0, 2]))),
        Sample(normal(rng, (2, 4)), prep=_at(-1, np.array([1, 1, 0, 3]))),
        Sample(normal(rng, ()), prep=_at(0, np.array([0])))],
    "index_add": lambda rng: [
        Sample(normal(rng, (2, 4)), normal(rng, (2, 3)), prep=_at(1, np.array([2, 0, 2]))),
        Sample(normal(rng, (3, 2)), normal(rng, (2, 2)), prep=_at(0, np.array([1, 1])),
               alpha=-2.0)],
    "masked_fill": lambda rng: [
        Sample(normal(rng, (3, 4)), _mask(rng, (3, 4)), value=-0.5),
        Sample(normal(rng, (3, 4)), _mask(rng, (1, 4)), value=2.0),
        Sample(normal(rng, (1, 4)), _mask(rng, (3, 4)), value=0.0),
        Sample(normal(rng, (3, 4)), np.array(0.7), prep=lambda a: [
            a[0], _like(a[0], np.arange(12).reshape(3, 4) % 3 == 0), a[1]])],
    "masked_scatter": lambda rng: [
        Sample(normal(rng, (3, 4)), normal(rng, (4, 4)),
               prep=lambda a: [a[0], _like(a[0], np.eye(3, 4, dtype=bool)), a[1]]),
        Sample(normal(rng, (3, 4)), normal(rng, (13,)),
               prep=lambda a: [a[0], _like(a[0], np.array([[True], [False], [True]])), a[1]])],
    "diagonal": lambda rng: [
        Sample(normal(rng, (3, 4))), Sample(normal(rng, (3, 2, 4)), offset=1, dim1=0, dim2=2),
        Sample(normal(rng, (3, 2, 4)), offset=-1, dim1=-1, dim2=0)],
    "diag_embed": lambda rng: [
        Sample(normal(rng, (2, 3))), Sample(normal(rng, (2, 3)), offset=1, dim1=0, dim2=2),
        Sample(normal(rng, (2, 3)), offset=-2, dim1=-1, dim2=1)],
    # composites
    "scatter": lambda rng: [
        Sample(normal(rng, (3, 5)), normal(rng, (2, 3)), prep=_at(1, IDX_S)),
        Sample(normal(rng, (3, 5)), prep=_at(1, IDX_S, 2.5)),
        Sample(normal(rng, (3, 2)), normal(rng, (2, 2)), prep=_at(0, np.array([[1, 0], [2, 1]])))],
    "masked_select": lambda rng: [
        Sample(normal(rng, (3, 4)), _mask(rng, (3, 4))),
        Sample(normal(rng, (1, 4)), _mask(rng, (3, 1)))],
    "einsum": lambda rng: [   # (the equation placed first by `prep`)
        Sample(normal(rng, (2, 3)), normal(rng, (3, 4)), prep=_equation("ij,jk->ik")),
        Sample(normal(rng, (2, 2, 3)), normal(rng, (2, 3, 2)), prep=_equation("bij,bjk")),
        Sample(normal(rng, (2, 3, 4)), normal(rng, (4,)), prep=_equation("...i,i->...")),
        Sample(normal(rng, (3, 3)), prep=_equation("ii->i")),
        Sample(normal(rng, (2, 3)), prep=_equation("ij->")),
        Sample(normal(rng, (2,)), normal(rng, (3,)), normal(rng, (2, 3)),
               prep=_equation("i,j,ij->j")),
        Sample(normal(rng, (1, 3)), normal(rng, (2, 3)), prep=_equation("ij,kj->ikj"))],
    "take_along_dim": lambda rng: [
        Sample(normal(rng, (3, 4)), np.array([[0, 2], [1, 1], [2, 0]]), dim=1),
        Sample(normal(rng, (3, 4)), np.array([5, 0, 5, 11])),
        Sample(normal(rng, (1, 3)), np.array([[0, 2], [1, 1]]), dim=1)],
}


INTERNAL = {
    "getitem": lambda rng: [
        Sample(normal(rng, (3, 4)), index=(1, slice(None, None, 2))),
        Sample(normal(rng, (3, 4)), index=(np.array([0, 2, 0]),)),
        Sample(normal(rng, (2, 3, 4)), index=(1, slice(None), np.array([[0, 3], [3, 3]]))),
        Sample(normal(rng, (3, 4)), index=np.arange(12).reshape(3, 4) % 5 == 1),
        Sample(normal(rng, ()), index=None)],
    "index_accumulate": lambda rng: [
        Sample(normal(rng, (3,)), index=(np.array([0, 2, 0]),), shape=(4,)),
        Sample(normal(rng, (3, 2, 2)), index=(1, slice(None), np.array([[0, 3], [3, 3]])),
               shape=(2, 3, 4))],  # (x[1, :, d] is (3, 2, 2): PyTorch's placement)
    "scatter_src": lambda rng: [
        Sample(normal(rng, (3, 5)), normal(rng, (2, 3)), prep=_at(1, IDX_S))],
    "scatter_value": lambda rng: [Sample(normal(rng, (3, 5)), prep=_at(1, IDX_S, 2.5))],
    "diagonal_backward": lambda rng: [
        Sample(normal(rng, (3,)), shape=(3, 4), offset=0, dim1=0, dim2=1),
        Sample(normal(rng, (2, 3)), shape=(3, 2, 4), offset=1, dim1=0, dim2=2)],
}
