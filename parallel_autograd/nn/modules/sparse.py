"""`Embedding` and `EmbeddingBag`."""
from __future__ import annotations

import numpy as np

from ... import version
from .. import functional as F
from .. import init
from ..module import Module
from ...tensor import Tensor
from ..parameter import Parameter
from ._utils import empty_parameter, float_dtype, size_int


class _Table(Module):
    """What Embedding and EmbeddingBag share: the table's sizes, its padding row and its
    initialisation (N(0, 1), the padding row zeroed), and `from_pretrained`'s shape check."""

    def _table(self, name: str, num_embeddings, embedding_dim, padding_idx, dtype,
               generator, weight=None, requires_grad: bool = True,
               error: type = ValueError) -> None:
        """The sizes, the padding row and the weight: drawn, or `weight` used as is
        (PyTorch's private `_weight`: shared, not copied; a wrong shape raises `error`)."""
        self.num_embeddings = size_int(num_embeddings, "num_embeddings", name)
        self.embedding_dim = size_int(embedding_dim, "embedding_dim", name)
        self.padding_idx = _padding_idx(padding_idx, self.num_embeddings)
        if weight is None:
            self.weight = empty_parameter((self.num_embeddings, self.embedding_dim),
                                          float_dtype(dtype, name))
            self.reset_parameters(generator)
            return
        self.weight = Parameter(weight, requires_grad=requires_grad)
        if self.weight.shape != (self.num_embeddings, self.embedding_dim):
            raise error("Shape of weight does not match num_embeddings and embedding_dim")

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Redraw the weight from N(0, 1) and zero the padding row."""
        init.normal_(self.weight, generator=generator)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0
            version.bump(self.weight)


def _pretrained_shape(embeddings) -> tuple:
    shape = np.shape(embeddings._data if isinstance(embeddings, Tensor) else embeddings)
    if len(shape) != 2:
        raise ValueError("Embeddings parameter is expected to be 2-dimensional")
    return shape


class Embedding(_Table):
    """A lookup table of `num_embeddings` vectors of size `embedding_dim` (PyTorch's
    `nn.Embedding`): integer indices of any shape -> (*shape, embedding_dim).

    Args:
        num_embeddings, embedding_dim: table size.
        padding_idx: a row that is initialised to zeros and gets no gradient
            (negative values count from the end and are stored normalised).
        max_norm: each row a forward uses whose `norm_type`-norm exceeds it is first
            renormalized to it, in place (PyTorch's).
        scale_grad_by_freq: each row's gradient divided by its index's count in the batch.
        sparse: accepted; the gradient is dense (no sparse tensors here).
        dtype: weight dtype (default: `pa.get_default_dtype()`).
        generator: numpy Generator for the initial values (default: the default
            generator).

    Parameter: `weight` (num_embeddings, embedding_dim) ~ N(0, 1), PyTorch's default.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self._table("Embedding", num_embeddings, embedding_dim, padding_idx, dtype,
                    generator, _weight, requires_grad=not _freeze)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False) -> "Embedding":
        """An Embedding whose weight is `embeddings` (2-D Tensor or ndarray, shared,
        not copied, like PyTorch); `freeze=True` makes it not require grad. The
        padding row is not zeroed; the other arguments are the constructor's."""
        shape = _pretrained_shape(embeddings)
        return cls(shape[0], shape[1], padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse,
                   _weight=embeddings, _freeze=freeze)

    def forward(self, input):
        """The rows of `weight` at the integer indices `input`."""
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        """PyTorch's: sizes, then padding_idx when set."""
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s


def _padding_idx(padding_idx, n: int) -> int | None:
    if padding_idx is None:
        return None
    if not -n <= padding_idx < n:
        raise ValueError(f"Embedding: padding_idx must be within num_embeddings "
                         f"(-{n} <= padding_idx < {n}), got {padding_idx}")
    return int(padding_idx) % n


class EmbeddingBag(_Table):
    """Sums, means or maxima of bags of embedding vectors (PyTorch's `nn.EmbeddingBag`,
    `F.embedding_bag`): `forward(input, offsets=None, per_sample_weights=None)` -> (B,
    embedding_dim), a 2-D input (B, N) being B bags of N indices, a 1-D one cut at
    `offsets`.

    Args:
        num_embeddings, embedding_dim: table size.
        max_norm, norm_type, scale_grad_by_freq, sparse: as `Embedding`'s.
        mode: 'sum', 'mean' (default) or 'max'.
        include_last_offset: `offsets` ends with the input's length (CSR layout).
        padding_idx: a row initialised to zeros, left out of every bag (so it gets no
            gradient; negative values count from the end and are stored normalised).
        dtype: weight dtype (default: `pa.get_default_dtype()`).
        generator: numpy Generator for the initial values (default: the default
            generator).

    Parameter: `weight` (num_embeddings, embedding_dim) ~ N(0, 1), PyTorch's default.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx: int | None = None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        self.num_embeddings = size_int(num_embeddings, "num_embeddings", "EmbeddingBag")
        self.embedding_dim = size_int(embedding_dim, "embedding_dim", "EmbeddingBag")
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode has to be one of sum, mean or max, got "
                             f"{mode!r}")
        self._table("EmbeddingBag", num_embeddings, embedding_dim, padding_idx, dtype,
                    generator, _weight, error=AssertionError)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.mode, self.sparse = mode, sparse
        self.include_last_offset = include_last_offset

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False,
                        padding_idx: int | None = None) -> "EmbeddingBag":
        """An EmbeddingBag whose weight is `embeddings` (2-D); `freeze=True` makes it not
        require grad. The other arguments are the constructor's."""
        shape = _pretrained_shape(embeddings)
        bag = cls(shape[0], shape[1], max_norm=max_norm, norm_type=norm_type,
                  scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
                  _weight=embeddings, include_last_offset=include_last_offset,
                  padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):
        """`F.embedding_bag` with this layer's weight and settings."""
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        """PyTorch's: sizes, the options that differ from the defaults, the mode."""
        s = f"{self.num_embeddings!r}, {self.embedding_dim!r}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx!r}"
        return s
