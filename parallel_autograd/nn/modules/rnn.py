"""`RNN`, `LSTM` and `GRU`: PyTorch's recurrent layers, parameter names and gate orders.

Each layer and direction is an input projection over the whole sequence (one GEMM) and
one fused recurrence node (`nn/_recurrent.py`), so a torch state dict loads as it is.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ... import dtypes as D
from .. import init
from .._recurrent import GATES, run
from ..module import Module
from ...device import check_device
from ...ops import index as IX
from ...ops import shape as S
from ...tensor import Tensor
from ..utils import rnn as _rnn_utils
from ..utils.rnn import PackedSequence
from ._utils import empty_parameter, float_dtype


def _input_dtype(x: np.ndarray, weight, exc: type = ValueError) -> None:
    """PyTorch's refusal of an input whose dtype is not the weights' (ValueError for the
    layers, whose message says how to convert; any input dtype, integer too): numpy would
    compute a float64 input against float32 weights silently in float64."""
    if x.dtype != weight.dtype:
        got, want = D.as_dtype(x.dtype), D.as_dtype(weight.dtype)
        raise exc(f"RNN input dtype ({got}) does not match weight dtype ({want}). Convert "
                  f"input: input.to({want}), or convert model: model.to({got})")


def _same_dtype(name: str, what: str, a: np.ndarray, weight) -> None:
    """PyTorch's RuntimeError for a state (or a cell's input) in another dtype than the
    weights (torch: "mat1 and mat2 must have the same dtype")."""
    if a.dtype != weight.dtype:
        raise RuntimeError(f"{name}: {what} and weights must have the same dtype, but got "
                           f"{a.dtype} and {weight.dtype}")


def _check_args(name: str, sizes: dict, flags: dict, device) -> None:
    """PyTorch's argument errors of the recurrent layers and cells: sizes positive ints,
    flags bools, and only the CPU."""
    for what, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name}: {what} should be of type int, got: {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"{name}: {what} must be greater than zero, got {v}")
    for what, v in flags.items():
        if not isinstance(v, bool):
            raise TypeError(f"{name}: {what} should be of type bool, got: {type(v).__name__}")
    check_device(device, name)  # DeviceUnavailableError unless the CPU


class RNNBase(Module):
    """The shared part of `RNN`, `LSTM` and `GRU` (PyTorch's `nn.RNNBase`).

    Parameters per layer `k` and direction (suffix `_reverse` for the backward one):
    `weight_ih_l{k}` (G*hidden_size, layer input size), `weight_hh_l{k}`
    (G*hidden_size, hidden_size), `bias_ih_l{k}`, `bias_hh_l{k}` (G*hidden_size,),
    G the number of gates (LSTM 4: i, f, g, o; GRU 3: r, z, n; RNN 1), all drawn
    from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) as in PyTorch.
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__()
        name = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(mode, mode)
        _check_args(name, dict(input_size=input_size, hidden_size=hidden_size,
                               num_layers=num_layers),
                    dict(bias=bias, batch_first=batch_first, bidirectional=bidirectional),
                    None)
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] "
                             f"representing the probability of an element being zeroed, "
                             f"got {dropout!r}")
        if proj_size != 0:
            raise ValueError(f"{name}: proj_size (LSTM projections) is not supported, "
                             f"got {proj_size!r}")
        _check_args(name, {}, {}, device)
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, "
                          "so non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=3)
        self.mode = mode
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        dt = float_dtype(dtype, name)
        gates = GATES[mode] * self.hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(self.num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                size_in = self.input_size if layer == 0 else self.hidden_size * dirs
                shapes = [("weight_ih", (gates, size_in)),
                          ("weight_hh", (gates, self.hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gates,)), ("bias_hh", (gates,))]
                for base, shape in shapes:
                    setattr(self, base + sfx, empty_parameter(shape, dt))
                    self._flat_weights_names.append(base + sfx)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: np.random.Generator | None = None) -> None:
        """Every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv, generator)

    @property
    def all_weights(self) -> list:
        """Per layer and direction, its parameters [w_ih, w_hh, b_ih, b_hh] (PyTorch's)."""
        per = 4 if self.bias else 2
        flat = [getattr(self, n) for n in self._flat_weights_names]
        return [flat[i:i + per] for i in range(0, len(flat), per)]

    def _weights(self) -> list:
        return [(w[0], w[1], w[2], w[3]) if self.bias else (w[0], w[1], None, None)
                for w in self.all_weights]

    def _check(self, input, hx, name: str) -> tuple:
        """(batched input, hx as a batched state or None, whether input was batched)."""
        x = input._data if isinstance(input, Tensor) else np.asarray(input)
        if x.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.ndim}D instead")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {x.shape[-1]}")
        if x.shape[0 if x.ndim == 2 or not self.batch_first else 1] == 0:
            raise ValueError(f"{name}: the input sequence is empty")
        _input_dtype(x, self.weight_ih_l0)
        batched = x.ndim == 3
        if not batched:
            input = S.unsqueeze(_tensor(input), 0 if self.batch_first else 1)
        n = (x.shape[0] if self.batch_first else x.shape[1]) if batched else 1
        want = ((2 if self.bidirectional else 1) * self.num_layers, n, self.hidden_size)
        states = () if hx is None else (hx if self.mode == "LSTM" else (hx,))
        if self.mode == "LSTM" and hx is not None and (
                not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0) for the LSTM")
        if self.mode != "LSTM" and isinstance(hx, (tuple, list)):
            raise TypeError(f"{name}: hx must be a tensor, not a {type(hx).__name__}")
        fixed = []
        for s in states:
            sd = s._data if isinstance(s, Tensor) else np.asarray(s)
            if sd.ndim != (3 if batched else 2):
                raise ValueError(f"{name}: for {'batched 3' if batched else 'unbatched 2'}-D "
                                 f"input, hx should also be {3 if batched else 2}-D but got "
                                 f"{sd.ndim}-D tensor")
            if not batched:
                s = S.unsqueeze(_tensor(s), 1)
                sd = sd[:, None]
            if sd.shape != want:
                raise ValueError(f"{name}: Expected hidden size {want}, got {sd.shape}")
            _same_dtype(name, "hx", sd, self.weight_ih_l0)
            fixed.append(s)
        hx = None if not fixed else (tuple(fixed) if self.mode == "LSTM" else fixed[0])
        return input, hx, batched

    def _run(self, input, hx, name: str) -> tuple:
        if isinstance(input, PackedSequence):
            return self._run_packed(input, hx, name)
        x, hx, batched = self._check(input, hx, name)
        if self.mode == "LSTM" and hx is None:
            hx = (None, None)
        out, h, c = run(self.mode, x, hx, self._weights(), self.num_layers,
                        self.bidirectional, self.batch_first, self.dropout, self.training)
        if not batched:
            out = S.squeeze(out, 0 if self.batch_first else 1)
            h = S.squeeze(h, 1)
            c = None if c is None else S.squeeze(c, 1)
        return out, h, c

    def _run_packed(self, packed: PackedSequence, hx, name: str) -> tuple:
        """The layers on packed sequences (PyTorch's semantics): a PackedSequence out of
        the same layout, and the states of each sequence's last step in the caller's batch
        order (hx is given in that order too). The sequences run padded, time-major and
        sorted, each step on the sequences still alive (`recurrence`'s batch_sizes)."""
        data = packed.data if isinstance(packed.data, Tensor) else _tensor(packed.data)
        if data.ndim != 2 or data.shape[1] != self.input_size:
            raise ValueError(f"{name}: packed data must be (steps, {self.input_size}), got "
                             f"{data.shape}")
        # torch 2.13's packed LSTM fails in its GEMM (RuntimeError), RNN and GRU check first
        _input_dtype(data._data, self.weight_ih_l0,
                     RuntimeError if self.mode == "LSTM" else ValueError)
        sizes = np.asarray(_rnn_utils._raw(packed.batch_sizes), np.int64)
        sort, unsort = (None if i is None else np.asarray(_rnn_utils._raw(i), np.int64)
                        for i in (packed.sorted_indices, packed.unsorted_indices))
        padded, _ = _rnn_utils.pad_packed_sequence(packed._replace(unsorted_indices=None))
        if hx is not None:
            hx = self._packed_state(hx, int(sizes[0]) if sizes.size else 0, name)
            if sort is not None:
                hx = tuple(IX.index_select(s, 1, sort) for s in hx) \
                    if self.mode == "LSTM" else IX.index_select(hx, 1, sort)
        elif self.mode == "LSTM":
            hx = (None, None)
        out, h, c = run(self.mode, padded, hx, self._weights(), self.num_layers,
                        self.bidirectional, False, self.dropout, self.training, sizes)
        if unsort is not None:
            h = IX.index_select(h, 1, unsort)
            c = None if c is None else IX.index_select(c, 1, unsort)
        rows = S.reshape(out, (-1, out.shape[-1]))
        return packed._replace(data=IX.index_select(rows, 0, _rnn_utils.packed_rows(sizes))), \
            h, c

    def _packed_state(self, hx, n: int, name: str):
        """hx for packed input, checked: (h0, c0) or h0, each (layers * directions, n, H)."""
        lstm = self.mode == "LSTM"
        if lstm != isinstance(hx, (tuple, list)) or (lstm and len(hx) != 2):
            raise TypeError(f"{name}: hx must be " + ("a tuple (h_0, c_0)" if lstm else
                                                       "a tensor"))
        want = ((2 if self.bidirectional else 1) * self.num_layers, n, self.hidden_size)
        states = tuple(_tensor(s) for s in (hx if lstm else (hx,)))
        for s in states:
            if s.shape != want:
                raise ValueError(f"{name}: Expected hidden size {want}, got {s.shape}")
            _same_dtype(name, "hx", s._data, self.weight_ih_l0)
        return states if lstm else states[0]

    def extra_repr(self) -> str:
        """PyTorch's: `input_size, hidden_size` and the options that differ from the
        defaults."""
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


def _tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


class RNN(RNNBase):
    """Elman RNN, `h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)` with act tanh or
    relu (PyTorch's `nn.RNN`).

    Args:
        input_size, hidden_size: sizes of x_t and h_t.
        num_layers: stacked layers (default 1).
        nonlinearity: "tanh" (default) or "relu".
        bias: learn `bias_ih_l*` and `bias_hh_l*` (default True).
        batch_first: input and output are (N, T, features) instead of (T, N, features).
        dropout: dropout on each layer's output but the last, in training (default 0).
        bidirectional: a second direction from the last step to the first; outputs are
            concatenated (default False).
        dtype: parameter dtype (default: `pa.get_default_dtype()`). generator: numpy
            Generator for the initial values (default: the default generator
            `pa.manual_seed` reseeds).

    `forward(input, hx=None)`: input (T, N, input_size) (batch_first: (N, T, ...)),
    unbatched (T, input_size), or a `nn.utils.rnn.PackedSequence` (then the output is one
    and h_n holds each sequence's last step); hx (num_layers * directions, N,
    hidden_size), zeros when None. Returns (output (T, N, directions * hidden_size), h_n
    (num_layers * directions, N, hidden_size)).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: Unknown nonlinearity '{nonlinearity}'. Select from "
                             f"'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype, generator=generator)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None) -> tuple:
        """(output, h_n)."""
        out, h, _ = self._run(input, hx, "RNN")
        return out, h


class LSTM(RNNBase):
    """Long short-term memory (PyTorch's `nn.LSTM`), gates in PyTorch's order:
    i, f, g, o = sigma, sigma, tanh, sigma of x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
    (row blocks of the weights), c_t = f c_{t-1} + i g, h_t = o tanh(c_t).

    Args as `RNN` (no nonlinearity); `proj_size` must be 0 (projections are not
    supported). `forward(input, hx=None)`: hx = (h_0, c_0), each (num_layers *
    directions, N, hidden_size), zeros when None. Returns (output, (h_n, c_n)).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype,
                         generator=generator)

    def forward(self, input, hx=None) -> tuple:
        """(output, (h_n, c_n))."""
        out, h, c = self._run(input, hx, "LSTM")
        return out, (h, c)


class GRU(RNNBase):
    """Gated recurrent unit (PyTorch's `nn.GRU`), gates in PyTorch's order r, z, n:
    r = sigma(W_ir x + b_ir + W_hr h + b_hr), z = sigma(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h.

    Args and `forward(input, hx=None)` as `RNN` (no nonlinearity). Returns
    (output, h_n).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype,
                         generator=generator)

    def forward(self, input, hx=None) -> tuple:
        """(output, h_n)."""
        out, h, _ = self._run(input, hx, "GRU")
        return out, h


class RNNCellBase(Module):
    """The shared part of `RNNCell`, `LSTMCell` and `GRUCell` (PyTorch's `nn.RNNCellBase`):
    one step of the layer's recurrence. Parameters `weight_ih` (G*hidden_size, input_size),
    `weight_hh` (G*hidden_size, hidden_size), `bias_ih`, `bias_hh` (G*hidden_size,), from
    U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)); a step is the layers' fused recurrence node
    over a sequence of one (`nn/_recurrent.py`), so cells and layers compute alike."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True,
                 device=None, dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__()
        name = type(self).__name__
        _check_args(name, dict(input_size=input_size, hidden_size=hidden_size),
                    dict(bias=bias), device)
        self.mode = mode
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bias
        dt = float_dtype(dtype, name)
        gates = GATES[mode] * self.hidden_size
        self.weight_ih = empty_parameter((gates, self.input_size), dt)
        self.weight_hh = empty_parameter((gates, self.hidden_size), dt)
        if bias:
            self.bias_ih = empty_parameter((gates,), dt)
            self.bias_hh = empty_parameter((gates,), dt)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters(generator)

    reset_parameters = RNNBase.reset_parameters

    def _step(self, input, states: tuple) -> tuple:
        """One step: the new states (h, or h and c), shaped like the input's batch."""
        name = type(self).__name__
        x = input._data if isinstance(input, Tensor) else np.asarray(input)
        if x.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input has inconsistent input_size: got {x.shape[-1]} "
                             f"expected {self.input_size}")
        _same_dtype(name, "input", x, self.weight_ih)
        batched = x.ndim == 2
        want = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        fixed = []
        for s in states:
            if s is None:
                fixed.append(None)
                continue
            sd = s._data if isinstance(s, Tensor) else np.asarray(s)
            if sd.shape != want:
                raise ValueError(f"{name}: Expected hidden size {want}, got {sd.shape}")
            _same_dtype(name, "hx", sd, self.weight_ih)
            fixed.append(S.unsqueeze(_tensor(s), 0) if batched else S.reshape(_tensor(s),
                                                                             (1, 1, -1)))
        seq = S.unsqueeze(_tensor(input), 0) if batched else S.reshape(_tensor(input),
                                                                       (1, 1, -1))
        hx = (fixed[0], fixed[1]) if self.mode == "LSTM" else fixed[0]
        w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        _, h, c = run(self.mode, seq, hx, [w], 1, False, False, 0.0, self.training)
        out = (h, c) if self.mode == "LSTM" else (h,)
        return tuple(S.reshape(o, want) for o in out)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """One Elman RNN step (PyTorch's `nn.RNNCell`): h' = act(x W_ih^T + b_ih + h W_hh^T +
    b_hh), act "tanh" (default) or "relu". `forward(input, hx=None)`: input (N, input_size)
    or (input_size,), hx of the matching (N, hidden_size) or (hidden_size,), zeros when None;
    returns h'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None,
                 generator: np.random.Generator | None = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: Unknown nonlinearity: {nonlinearity}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, bias, device, dtype, generator)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        """h'."""
        return self._step(input, (hx,))[0]


class LSTMCell(RNNCellBase):
    """One LSTM step (PyTorch's `nn.LSTMCell`, gates i, f, g, o). `forward(input, hx=None)`:
    hx = (h, c), zeros when None; returns (h', c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype, generator)

    def forward(self, input, hx=None) -> tuple:
        """(h', c')."""
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTMCell: hx must be a tuple (h, c)")
        return self._step(input, (None, None) if hx is None else tuple(hx))


class GRUCell(RNNCellBase):
    """One GRU step (PyTorch's `nn.GRUCell`, gates r, z, n). `forward(input, hx=None)` as
    `RNNCell`'s; returns h'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None, generator: np.random.Generator | None = None) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype, generator)

    def forward(self, input, hx=None):
        """h'."""
        return self._step(input, (hx,))[0]
