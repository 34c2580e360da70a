"""Datasets, as `torch.utils.data`'s: map-style (`__getitem__` + `__len__`) and iterable
(`__iter__`), and the usual compositions.

Thread safety: the datasets here only read what they were given; a DataLoader with workers
calls `__getitem__` from several threads at once, so a dataset of your own must allow that.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

from ...random import resolve_generator
from ...tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "ConcatDataset",
           "Subset", "random_split"]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: `dataset[i]` for `i` in `range(len(dataset))`. Subclasses
    define `__getitem__` (and `__len__`, which samplers need). `a + b` concatenates."""

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset read as a stream (`__iter__`). With workers each worker iterates its own
    copy of it: use `get_worker_info()` in `__iter__` to split the stream, as in PyTorch."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        raise TypeError("IterableDatasets are concatenated with ChainDataset, which is not "
                        "provided; chain their iterators instead")


class TensorDataset(Dataset):
    """Samples from tensors of the same first dimension: item i is the tuple of each
    tensor's row i (PyTorch's TensorDataset)."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0] if tensors[0].ndim else None
        if n is None or any(t.ndim == 0 or t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors: every tensor must have the same "
                             f"first dimension, got shapes {[tuple(t.shape) for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class StackDataset(Dataset):
    """Datasets of the same length side by side: item i is the tuple (or dict, given
    keywords) of each one's item i."""

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or ``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        datasets = args or tuple(kwargs.values())
        if not datasets:
            raise ValueError("At least one dataset should be passed")
        lengths = {len(d) for d in datasets}
        if len(lengths) != 1:
            raise ValueError("Size mismatch between datasets")
        self._length = lengths.pop()
        self.datasets = args if args else kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """Datasets one after the other; `cumulative_sizes` are their running lengths."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]).tolist())

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = 0 if which == 0 else self.cumulative_sizes[which - 1]
        return self.datasets[which][idx - start]


class Subset(Dataset):
    """The items of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence, generator=None) -> list:
    """Split `dataset` into non-overlapping random `Subset`s of the given `lengths` (counts
    summing to its length, or fractions summing to 1: the remainder is dealt one by one,
    round robin, as PyTorch does). `generator`: where the permutation is drawn from (default:
    the current generator)."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for f in lengths:
            if not 0 <= f <= 1:
                raise ValueError(f"Fraction at index {lengths.index(f)} is not between 0 and 1")
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = resolve_generator(generator).permutation(n).tolist()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k]))
        start += k
    return out
