"""The benchmark workloads: one definition per workload, built with parallel_autograd
and with PyTorch.

Each workload is a seeded numpy data set and one definition `define(data, backend)`
-> `(loss, leaves)` written against a `Backend` (the library's module, its functional
module, how to make a leaf and a constant), so both libraries run the same ops on the
same arrays:

- `data(seed, size)`: the arrays (and, for tiny-nodes, the random DAG recipe);
- `build(data)`: the forward pass with parallel_autograd tensors;
- `build_torch(data)`: the same computation with torch tensors (float64, leaves
  copied from the arrays, constants sharing them through `torch.from_numpy`).

`size` is "full" (the benchmark's sizes), "quick" (smaller, for `--quick`) or "tiny"
(for tests). Everything is float64 (`backend.DTYPE`, stated: the library's default
dtype is float32) but the real programs' "-f32" rows. `build(name, seed, size)` and
`build_torch(name, seed, size)` build a workload in one call.

`branches` is True for workloads built with independent branches (inter-op
parallelism available); mlp-chain, cnn and lstm are mostly chains.

The real-program workloads (issue 28, `stress.compare.programs`: `gpt`, `mnist-cnn`,
`lstm-lm`, `gru-lm`, `transformer-lm`, `dcgan`, each as `NAME-f32` and `NAME-f64`) are
`nn.Module` models: their `program(data, backend)` builds the model once (a `Session`
keeps it), their `define` builds it afresh for the one-off passes (bound, memory,
timeline). Their group is "program"; the first eight workloads' is "model".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from . import models as M
from . import programs as P
from . import synthetic as S
from .backend import PA, torch_backend

SIZES = ("full", "quick", "tiny")


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    dims: dict            # size -> dict of dimensions
    make_data: Callable   # (rng, **dims) -> dict
    define: Callable      # (data, backend) -> (loss, leaves): the one definition
    branches: bool = True
    program: Optional[Callable] = None  # (data, backend) -> programs.Program
    group: str = "model"  # "program": a real-program workload (issue 28)
    dtype: str = "f64"

    def data(self, seed: int = 0, size: str = "full") -> dict:
        """The workload's seeded arrays at `size`, with its dimensions under "_dims"."""
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size!r}")
        d = self.make_data(np.random.default_rng(seed), **self.dims[size])
        d["_dims"] = dict(self.dims[size])
        return d

    def build(self, data: dict):
        """The forward pass with parallel_autograd tensors: (loss, leaves)."""
        return self.define(data, PA)

    def build_torch(self, data: dict):
        """The same computation with torch tensors: (loss, leaves)."""
        return self.define(data, torch_backend())


# ---- the registry -------------------------------------------------------------------------------
WORKLOADS = {w.name: w for w in [
    Workload("wide-matmul", "16 branches tanh(x @ A_i) @ B_i, summed; 256x256",
             {"full": dict(n=256, branches=16), "quick": dict(n=128, branches=16),
              "tiny": dict(n=16, branches=4)},
             S.wide_matmul_data, S.wide_matmul),
    Workload("wide-elementwise", "32 chains of 6 elementwise ops on 200k vectors, summed",
             {"full": dict(n=200_000, branches=32), "quick": dict(n=50_000, branches=32),
              "tiny": dict(n=500, branches=4)},
             S.wide_ew_data, S.wide_ew),
    Workload("mlp-chain", "8 layers, batch 256, width 512, relu, mean squared output",
             {"full": dict(batch=256, width=512, layers=8),
              "quick": dict(batch=128, width=256, layers=8),
              "tiny": dict(batch=8, width=16, layers=3)},
             S.mlp_data, S.mlp, branches=False),
    Workload("tiny-nodes", "random DAG of ~3,000 elementwise nodes on 64-element vectors",
             {"full": dict(nodes=3000, vec=64, leaves=16, window=48),
              "quick": dict(nodes=1500, vec=64, leaves=16, window=48),
              "tiny": dict(nodes=60, vec=8, leaves=4, window=8)},
             S.tiny_data, S.tiny),
    Workload("attention", "batch 8, sequence 128, model 256, 8 heads as branches, out proj",
             {"full": dict(batch=8, seq=128, model=256, heads=8),
              "quick": dict(batch=2, seq=128, model=256, heads=8),
              "tiny": dict(batch=2, seq=8, model=16, heads=2)},
             M.attention_data, M.attention),
    Workload("cnn", "conv3x3(3->16)-relu-pool, conv3x3(16->32)-relu-pool, linear, CE; "
             "batch 64, 32x32",
             {"full": dict(batch=64, image=32, c1=16, c2=32, classes=10),
              "quick": dict(batch=16, image=32, c1=16, c2=32, classes=10),
              "tiny": dict(batch=2, image=8, c1=2, c2=3, classes=3)},
             M.cnn_data, M.cnn, branches=False),
    Workload("lstm", "LSTM unrolled 32 steps, batch 32, input 64, hidden 128, per-gate matmuls",
             {"full": dict(batch=32, steps=32, inp=64, hidden=128),
              "quick": dict(batch=32, steps=16, inp=64, hidden=128),
              "tiny": dict(batch=2, steps=3, inp=4, hidden=5)},
             M.lstm_data, M.lstm, branches=False),
    Workload("transformer-lora", "2 frozen pre-norm blocks (batch 4, seq 128, model 256, "
             "4 heads), rank-8 adapters on q, v, o, ffn",
             {"full": dict(batch=4, seq=128, model=256, heads=4, rank=8, layers=2),
              "quick": dict(batch=1, seq=64, model=256, heads=4, rank=8, layers=2),
              "tiny": dict(batch=1, seq=4, model=8, heads=2, rank=2, layers=1)},
             M.lora_data, M.lora),
]}


def _program_define(make: Callable) -> Callable:
    def define(data, B):
        p = make(data, B)
        return p.loss(), p.leaves
    return define


def _programs() -> list:
    out = []
    for name, (description, _, _, dims) in P.PROGRAMS.items():
        for dt in P.DTYPES:
            make = P.program(name, dt)
            out.append(Workload(f"{name}-{dt}", f"{description} ({dt[1:]}-bit)", dims,
                                P.program_data(name, dt), _program_define(make),
                                branches=False, program=make, group="program", dtype=dt))
    return out


WORKLOADS.update({w.name: w for w in _programs()})
PROGRAM_WORKLOADS = tuple(n for n, w in WORKLOADS.items() if w.group == "program")
MODEL_WORKLOADS = tuple(n for n, w in WORKLOADS.items() if w.group == "model")


def build(name: str, seed: int = 0, size: str = "full"):
    """The parallel_autograd graph of workload `name`: (loss, leaves)."""
    w = WORKLOADS[name]
    return w.build(w.data(seed, size))


def build_torch(name: str, seed: int = 0, size: str = "full"):
    """The same graph on the same data with PyTorch (float64, CPU): (loss, leaves)."""
    w = WORKLOADS[name]
    return w.build_torch(w.data(seed, size))
