"""Samples of the shape and view ops (ops/shape.py; tests/op_samples.py says how samples
work; arguments that are not tensors are keywords, or placed by `prep`, as gradcheck makes
every positional argument a tensor): sizes as a tuple and spread, negative dims, 0-d and
empty inputs, the composites (their registry checks run on what they return, tuples too).

`INTERNAL` holds samples of the ops the registry walk does not see (not exported: Tensor
methods PyTorch has no function for, the adjoints, numpy's pad); tests/test_ops_shape.py
runs the registry's checks on them.
"""
from __future__ import annotations

import numpy as np
from op_samples import Sample


def normal(rng, shape):
    return rng.standard_normal(shape)


def distinct(rng, shape):
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2 + 0.5) * 0.3).reshape(shape)


def _spread(*sizes):
    """prep: the tensor, then `sizes` as positional arguments (`x.reshape(2, 3)`)."""
    return lambda a: [a[0], *sizes]


def _joined(dim):
    """prep: every tensor argument in one list (cat, stack), `dim` after it."""
    return lambda a: [list(a), dim]


def _three(rng, shapes):
    return [normal(rng, s) for s in shapes]


SAMPLES = {
    "reshape": lambda rng: [
        Sample(normal(rng, (2, 3, 4)), shape=(6, 4)), Sample(normal(rng, (2, 3, 4)), shape=(-1,)),
        Sample(normal(rng, (2, 3)), shape=(3, -1, 1)), Sample(normal(rng, ()), shape=(1, 1)),
        Sample(normal(rng, (2, 0)), shape=(0, 5)),
        Sample(normal(rng, (4, 3)).T, shape=(12,))],  # not contiguous: a copy
    "permute": lambda rng: [
        Sample(normal(rng, (2, 3, 4)), dims=(2, 0, 1)), Sample(normal(rng, (2, 3)), dims=(-1, 0)),
        Sample(normal(rng, ()), dims=())],
    "broadcast_to": lambda rng: [
        Sample(normal(rng, (3, 1)), size=(2, 3, 4)), Sample(normal(rng, ()), size=(2, 3)),
        Sample(normal(rng, (1, 4)), size=(-1, 4)), Sample(normal(rng, (2, 1)), size=(3, 2, -1))],
    "squeeze": lambda rng: [
        Sample(normal(rng, (2, 1, 3, 1))), Sample(normal(rng, (2, 1, 3)), dim=1),
        Sample(normal(rng, (2, 1, 3)), dim=0), Sample(normal(rng, (1, 2, 1)), dim=(0, -1)),
        Sample(normal(rng, ()), dim=0), Sample(normal(rng, (1,)))],
    "unsqueeze": lambda rng: [
        Sample(normal(rng, (2, 3)), dim=0), Sample(normal(rng, (2, 3)), dim=-1),
        Sample(normal(rng, (2, 3)), dim=1), Sample(normal(rng, ()), dim=0)],
    "clone": lambda rng: [Sample(normal(rng, (3, 4))), Sample(normal(rng, (4, 3)).T),
                          Sample(normal(rng, ()))],
    "cat": lambda rng: [
        Sample(*_three(rng, [(1, 3), (2, 3), (3, 3)]), prep=_joined(0)),
        Sample(*_three(rng, [(2, 1), (2, 2), (2, 4)]), prep=_joined(-1)),
        Sample(*_three(rng, [(2, 3), (0,), (1, 3)]), prep=_joined(0)),  # the legacy skip
        Sample(*_three(rng, [(2, 0), (2, 3)]), prep=_joined(1)),
        Sample(*_three(rng, [(4,)]), prep=_joined(0))],
    "stack": lambda rng: [
        Sample(*_three(rng, [(2, 3)] * 3), prep=_joined(0)),
        Sample(*_three(rng, [(2, 3)] * 2), prep=_joined(2)),
        Sample(*_three(rng, [(2, 3)] * 2), prep=_joined(-2)),
        Sample(*_three(rng, [()] * 3), prep=_joined(0))],
    "flip": lambda rng: [
        Sample(normal(rng, (2, 3, 4)), dims=(0, 2)), Sample(normal(rng, (2, 3)), dims=(-1,)),
        Sample(normal(rng, (3,)), dims=[0]), Sample(normal(rng, ()), dims=(0,))],
    "roll": lambda rng: [
        Sample(normal(rng, (2, 3)), shifts=2), Sample(normal(rng, (2, 3, 4)), shifts=(1, -2),
                                                      dims=(0, 2)),
        Sample(normal(rng, (2, 3)), shifts=(1, 2), dims=(1, 1)), Sample(normal(rng, (4,)),
                                                                       shifts=-5, dims=0)],
    "tril": lambda rng: [Sample(normal(rng, (3, 4))), Sample(normal(rng, (2, 3, 4)), diagonal=-1),
                         Sample(normal(rng, (4, 3)), diagonal=2)],
    "triu": lambda rng: [Sample(normal(rng, (3, 4))), Sample(normal(rng, (2, 3, 4)), diagonal=1),
                         Sample(normal(rng, (4, 3)), diagonal=-2)],
    # composites
    "flatten": lambda rng: [
        Sample(normal(rng, (2, 3, 4))), Sample(normal(rng, (2, 3, 4)), start_dim=1),
        Sample(normal(rng, (2, 3, 4)), end_dim=-2), Sample(normal(rng, ()))],
    "ravel": lambda rng: [Sample(normal(rng, (2, 3))), Sample(normal(rng, (3, 2)).T)],
    "unflatten": lambda rng: [
        Sample(normal(rng, (2, 6)), dim=1, sizes=(2, 3)),
        Sample(normal(rng, (6, 2)), dim=0, sizes=(-1, 2))],
    "transpose": lambda rng: [
        Sample(normal(rng, (2, 3, 4)), dim0=0, dim1=2), Sample(normal(rng, (2, 3)), dim0=-1,
                                                              dim1=0),
        Sample(normal(rng, ()), dim0=0, dim1=-1)],
    "swapaxes": lambda rng: [Sample(normal(rng, (2, 3, 4)), axis0=1, axis1=-1)],
    "swapdims": lambda rng: [Sample(normal(rng, (2, 3, 4)), dim0=2, dim1=0)],
    "t": lambda rng: [Sample(normal(rng, (2, 3))), Sample(normal(rng, (3,))),
                      Sample(normal(rng, ()))],
    "movedim": lambda rng: [
        Sample(normal(rng, (2, 3, 4)), source=0, destination=-1),
        Sample(normal(rng, (2, 3, 4)), source=(0, 1), destination=(2, 0))],
    "split": lambda rng: [
        Sample(normal(rng, (7, 2)), split_size_or_sections=3),
        Sample(normal(rng, (2, 5)), split_size_or_sections=[1, 4], dim=1),
        Sample(normal(rng, (2, 4)), split_size_or_sections=2, dim=-1)],
    "chunk": lambda rng: [Sample(normal(rng, (2, 5)), chunks=3, dim=1),
                          Sample(normal(rng, (6,)), chunks=4)],
    "tensor_split": lambda rng: [  # (PyTorch's overloads name the argument apart: positional)
        Sample(normal(rng, (7, 2)), prep=_spread(3)),
        Sample(normal(rng, (2, 6)), prep=_spread([1, -2, 4]), dim=1)],
    "unbind": lambda rng: [Sample(normal(rng, (2, 3))), Sample(normal(rng, (2, 3)), dim=1)],
    "narrow": lambda rng: [Sample(normal(rng, (2, 4)), dim=1, start=1, length=2),
                           Sample(normal(rng, (3, 2)), dim=0, start=-2, length=2)],
    "select": lambda rng: [Sample(normal(rng, (2, 4)), dim=1, index=-1),
                           Sample(normal(rng, (3, 2)), dim=0, index=1)],
    "tile": lambda rng: [Sample(normal(rng, (2, 3)), dims=(2,)),
                         Sample(normal(rng, (2, 3)), dims=(2, 1, 3))],
    "repeat_interleave": lambda rng: [
        Sample(normal(rng, (2, 3)), repeats=2), Sample(normal(rng, (2, 3)), repeats=2, dim=1),
        Sample(normal(rng, (3, 2)), np.array([1, 0, 2]), dim=0)],
}


INTERNAL = {
    "view": lambda rng: [Sample(normal(rng, (2, 6)), prep=_spread(3, 4)),
                         Sample(normal(rng, (2, 6)), prep=_spread((-1,)))],
    "view_as": lambda rng: [Sample(normal(rng, (2, 6)), normal(rng, (3, 4)), grad=[0])],
    "reshape_as": lambda rng: [Sample(normal(rng, (2, 6)), normal(rng, (4, 3)), grad=[0])],
    "expand_as": lambda rng: [Sample(normal(rng, (3, 1)), normal(rng, (2, 3, 4)), grad=[0])],
    "sum_to_size": lambda rng: [Sample(normal(rng, (2, 3, 4)), prep=_spread(3, 1)),
                                Sample(normal(rng, (2, 3)), prep=_spread((2, 3)))],
    "repeat": lambda rng: [Sample(normal(rng, (2, 3)), repeats=(2, 1, 3)),
                           Sample(normal(rng, (2, 3)), prep=_spread(2, 2))],
    "unfold": lambda rng: [
        Sample(normal(rng, (7,)), dimension=0, size=3, step=2),
        Sample(normal(rng, (2, 5, 3)), dimension=1, size=2, step=1),
        Sample(normal(rng, (2, 6)), dimension=-1, size=4, step=3),
        Sample(normal(rng, ()), dimension=0, size=1, step=1)],
    "unfold_backward": lambda rng: [
        Sample(normal(rng, (3, 3)), shape=(7,), dimension=0, size=3, step=2),
        Sample(normal(rng, (2, 4, 3, 2)), shape=(2, 5, 3), dimension=1, size=2, step=1)],
    "pad": lambda rng: [Sample(normal(rng, (2, 3)), pad_width=1),
                        Sample(normal(rng, (2, 3)), pad_width=((0, 2), (1, 0)), value=-1.5)],
}
