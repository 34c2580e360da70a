"""The benchmark workloads: the same graph built with parallel_autograd and with PyTorch.

Each workload has three parts that share one seeded numpy data set:

- `data(seed, size)`: the arrays (and, for tiny-nodes, the random DAG recipe);
- `build(data)` -> `(loss, leaves)`: the forward pass with parallel_autograd tensors;
- `build_torch(data)` -> `(loss, leaves)`: the same computation with torch tensors
  (float64, built with `torch.from_numpy` on the same arrays).

`size` is "full" (the sizes of the benchmark issue), "quick" (smaller, for `--quick`)
or "tiny" (for tests). Everything is float64. The module-level shortcuts
`wide_matmul(seed)`, `wide_matmul_torch(seed)`, ... build a workload in one call.

`branches` is True for workloads built with independent branches (inter-op
parallelism available); mlp-chain, cnn and lstm are mostly chains.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import parallel_autograd as pa
from parallel_autograd.nn import functional as F

SIZES = ("full", "quick", "tiny")


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    dims: dict            # size -> dict of dimensions
    make_data: Callable   # (rng, **dims) -> dict
    build: Callable       # (data) -> (loss, leaves), parallel_autograd
    build_torch: Callable  # (data) -> (loss, leaves), torch
    branches: bool = True

    def data(self, seed: int = 0, size: str = "full") -> dict:
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size!r}")
        d = self.make_data(np.random.default_rng(seed), **self.dims[size])
        d["_dims"] = dict(self.dims[size])
        return d


# ---- helpers -----------------------------------------------------------------------
def _leaf(a, requires_grad=True):
    return pa.Tensor(a, requires_grad=requires_grad)


def _const(a):
    return pa.Tensor._wrap(np.asarray(a))


def _tleaf(a, requires_grad=True):
    import torch
    t = torch.from_numpy(np.array(a, dtype=np.float64, copy=True))
    return t.requires_grad_(requires_grad)


def _normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


# ---- wide-matmul: 16 branches tanh(x @ A_i) @ B_i, summed --------------------------------
def _wide_matmul_data(rng, n, branches):
    return {"x": _normal(rng, (n, n)),
            "A": _normal(rng, (branches, n, n), 1 / math.sqrt(n)),
            "B": _normal(rng, (branches, n, n), 1 / math.sqrt(n))}


def _wide_matmul(d):
    x = _leaf(d["x"])
    A = [_leaf(a) for a in d["A"]]
    B = [_leaf(b) for b in d["B"]]
    out = None
    for a, b in zip(A, B):
        y = pa.tanh(x @ a) @ b
        out = y if out is None else out + y
    return out.sum(), [x, *A, *B]


def _wide_matmul_torch(d):
    import torch
    x = _tleaf(d["x"])
    A = [_tleaf(a) for a in d["A"]]
    B = [_tleaf(b) for b in d["B"]]
    out = None
    for a, b in zip(A, B):
        y = torch.tanh(x @ a) @ b
        out = y if out is None else out + y
    return out.sum(), [x, *A, *B]


# ---- wide-elementwise: 32 chains of 6 elementwise ops, summed -------------------------------
def _wide_ew_data(rng, n, branches):
    return {"x": _normal(rng, n),
            "a": 0.5 + rng.random(branches),          # one scale parameter per branch
            "b": _normal(rng, (branches, n), 0.1)}    # one bias vector per branch


def _wide_ew(d):
    x = _leaf(d["x"])
    a = [_leaf(v) for v in d["a"]]
    b = [_leaf(v) for v in d["b"]]
    out = None
    for ai, bi in zip(a, b):
        h = x * ai                # scale by a parameter
        h = pa.sin(h)
        h = pa.exp(h * 0.5)       # exp of a scaled value
        h = h + bi                # add
        h = pa.tanh(h)
        h = h * h                 # square
        out = h if out is None else out + h
    return out.sum(), [x, *a, *b]


def _wide_ew_torch(d):
    import torch
    x = _tleaf(d["x"])
    a = [_tleaf(v) for v in d["a"]]
    b = [_tleaf(v) for v in d["b"]]
    out = None
    for ai, bi in zip(a, b):
        h = x * ai
        h = torch.sin(h)
        h = torch.exp(h * 0.5)
        h = h + bi
        h = torch.tanh(h)
        h = h * h
        out = h if out is None else out + h
    return out.sum(), [x, *a, *b]


# ---- mlp-chain: 8 layers, relu, mean squared output -----------------------------------------
def _mlp_data(rng, batch, width, layers):
    return {"x": _normal(rng, (batch, width)),
            "W": _normal(rng, (layers, width, width), math.sqrt(2 / width)),
            "b": _normal(rng, (layers, width), 0.01)}


def _mlp(d):
    h = _const(d["x"])
    W = [_leaf(w) for w in d["W"]]
    b = [_leaf(v) for v in d["b"]]
    for i, (w, bi) in enumerate(zip(W, b)):
        h = h @ w + bi
        if i < len(W) - 1:
            h = pa.relu(h)
    return pa.mean(h * h), [*W, *b]


def _mlp_torch(d):
    import torch
    h = torch.from_numpy(d["x"])
    W = [_tleaf(w) for w in d["W"]]
    b = [_tleaf(v) for v in d["b"]]
    for i, (w, bi) in enumerate(zip(W, b)):
        h = h @ w + bi
        if i < len(W) - 1:
            h = torch.relu(h)
    return torch.mean(h * h), [*W, *b]


# ---- tiny-nodes: a random DAG of small elementwise nodes -----------------------------------
_UNARY = ("sin", "tanh", "scale")
_BINARY = ("add", "sub", "mul")


def _tiny_data(rng, nodes, vec, leaves, window):
    """A recipe of ops over value indices: leaves are values 0..leaves-1; each op reads
    one or two of the last `window` values. Sinks (values nobody read) are summed with
    a chain of adds, then reduced: about `nodes` op nodes in total."""
    ops = []
    consumed = [False] * leaves
    sinks = leaves
    while len(ops) + sinks < nodes:
        n_values = leaves + len(ops)
        lo = max(0, n_values - window)
        if rng.random() < 0.45:
            op = _UNARY[rng.integers(len(_UNARY))]
            args = (int(rng.integers(lo, n_values)),)
        else:
            op = _BINARY[rng.integers(len(_BINARY))]
            args = tuple(int(i) for i in rng.integers(lo, n_values, size=2))
        for i in set(args):
            if not consumed[i]:
                consumed[i] = True
                sinks -= 1
        ops.append((op, args))
        consumed.append(False)
        sinks += 1
    return {"leaves": _normal(rng, (leaves, vec)), "ops": ops,
            "sinks": [i for i, c in enumerate(consumed) if not c]}


def _tiny_run(d, values, lib):
    for op, args in d["ops"]:
        xs = [values[i] for i in args]
        if op == "sin":
            v = lib.sin(xs[0])
        elif op == "tanh":
            v = lib.tanh(xs[0])
        elif op == "scale":
            v = xs[0] * 0.9
        elif op == "add":
            v = xs[0] + xs[1]
        elif op == "sub":
            v = xs[0] - xs[1]
        else:
            v = xs[0] * xs[1]
        values.append(v)
    out = None
    for i in d["sinks"]:
        out = values[i] if out is None else out + values[i]
    return out.sum()


def _tiny(d):
    leaves = [_leaf(v) for v in d["leaves"]]
    return _tiny_run(d, list(leaves), pa), leaves


def _tiny_torch(d):
    import torch
    leaves = [_tleaf(v) for v in d["leaves"]]
    return _tiny_run(d, list(leaves), torch), leaves


# ---- attention: 8 heads as separate branches, output projection -------------------------------
# Projections go through `linear` (weights (out, in), as in PyTorch): one GEMM over
# batch x sequence rows, where a 3-D @ 2-D matmul would loop over the batch.
def _attention_data(rng, batch, seq, model, heads):
    dh = model // heads
    s = 1 / math.sqrt(model)
    return {"x": _normal(rng, (batch, seq, model)),
            "Wq": _normal(rng, (heads, dh, model), s), "Wk": _normal(rng, (heads, dh, model), s),
            "Wv": _normal(rng, (heads, dh, model), s), "Wo": _normal(rng, (model, model), s)}


def _attention_run(x, Wq, Wk, Wv, Wo, lib, F_, cat, softmax):
    scale = 1 / math.sqrt(Wq[0].shape[0])
    heads = []
    for wq, wk, wv in zip(Wq, Wk, Wv):
        q, k, v = F_.linear(x, wq), F_.linear(x, wk), F_.linear(x, wv)
        p = softmax((q @ k.transpose(-1, -2)) * scale)
        heads.append(p @ v)
    out = F_.linear(cat(heads), Wo)
    return lib.mean(out * out)


def _attention(d):
    x = _leaf(d["x"])
    Wq, Wk, Wv = ([_leaf(w) for w in d[k]] for k in ("Wq", "Wk", "Wv"))
    Wo = _leaf(d["Wo"])
    loss = _attention_run(x, Wq, Wk, Wv, Wo, pa, F, lambda hs: pa.concat(hs, axis=-1),
                          lambda s: pa.softmax(s, axis=-1))
    return loss, [x, *Wq, *Wk, *Wv, Wo]


def _attention_torch(d):
    import torch
    import torch.nn.functional as TF
    x = _tleaf(d["x"])
    Wq, Wk, Wv = ([_tleaf(w) for w in d[k]] for k in ("Wq", "Wk", "Wv"))
    Wo = _tleaf(d["Wo"])
    loss = _attention_run(x, Wq, Wk, Wv, Wo, torch, TF, lambda hs: torch.cat(hs, dim=-1),
                          lambda s: torch.softmax(s, dim=-1))
    return loss, [x, *Wq, *Wk, *Wv, Wo]


# ---- cnn: conv-relu-pool twice, linear, cross-entropy ------------------------------------------
def _cnn_data(rng, batch, image, c1, c2, classes):
    flat = c2 * (image // 4) ** 2
    return {"x": _normal(rng, (batch, 3, image, image)),
            "w1": _normal(rng, (c1, 3, 3, 3), math.sqrt(2 / 27)), "b1": np.zeros(c1),
            "w2": _normal(rng, (c2, c1, 3, 3), math.sqrt(2 / (9 * c1))), "b2": np.zeros(c2),
            "wf": _normal(rng, (classes, flat), 1 / math.sqrt(flat)), "bf": np.zeros(classes),
            "y": rng.integers(0, classes, batch)}


_CNN_PARAMS = ("w1", "b1", "w2", "b2", "wf", "bf")


def _cnn_run(F_, x, p, y, flatten):
    h = F_.max_pool2d(F_.relu(F_.conv2d(x, p["w1"], p["b1"], padding=1)), 2)
    h = F_.max_pool2d(F_.relu(F_.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
    return F_.cross_entropy(F_.linear(flatten(h), p["wf"], p["bf"]), y)


def _cnn(d):
    p = {k: _leaf(d[k]) for k in _CNN_PARAMS}
    loss = _cnn_run(F, _const(d["x"]), p, d["y"], lambda h: pa.flatten(h, 1))
    return loss, list(p.values())


def _cnn_torch(d):
    import torch
    import torch.nn.functional as TF
    p = {k: _tleaf(d[k]) for k in _CNN_PARAMS}
    loss = _cnn_run(TF, torch.from_numpy(d["x"]), p, torch.from_numpy(d["y"]),
                    lambda h: torch.flatten(h, 1))
    return loss, list(p.values())


# ---- lstm: unrolled, one matmul pair per gate, readout of the last state ------------------------
_GATES = ("i", "f", "g", "o")


def _lstm_data(rng, batch, steps, inp, hidden):
    d = {"x": _normal(rng, (steps, batch, inp)), "y": _normal(rng, (batch, 8)),
         "Wy": _normal(rng, (hidden, 8), 1 / math.sqrt(hidden))}
    for g in _GATES:
        d["W" + g] = _normal(rng, (inp, hidden), 1 / math.sqrt(inp))
        d["U" + g] = _normal(rng, (hidden, hidden), 1 / math.sqrt(hidden))
        d["b" + g] = np.full(hidden, 1.0 if g == "f" else 0.0)
    return d


def _lstm_run(d, p, lib, const):
    batch, hidden = d["x"].shape[1], d["Uf"].shape[0]
    h = c = const(np.zeros((batch, hidden)))
    for t in range(d["x"].shape[0]):
        xt = const(d["x"][t])
        z = {g: xt @ p["W" + g] + h @ p["U" + g] + p["b" + g] for g in _GATES}
        c = lib.sigmoid(z["f"]) * c + lib.sigmoid(z["i"]) * lib.tanh(z["g"])
        h = lib.sigmoid(z["o"]) * lib.tanh(c)
    e = h @ p["Wy"] - const(d["y"])
    return lib.mean(e * e)


def _lstm_keys():
    return [k + g for k in ("W", "U", "b") for g in _GATES] + ["Wy"]


def _lstm(d):
    p = {k: _leaf(d[k]) for k in _lstm_keys()}
    return _lstm_run(d, p, pa, _const), list(p.values())


def _lstm_torch(d):
    import torch
    p = {k: _tleaf(d[k]) for k in _lstm_keys()}
    return _lstm_run(d, p, torch, torch.from_numpy), list(p.values())


# ---- transformer-lora: frozen pre-norm blocks, trainable low-rank adapters -----------------------
_LORA_ON = ("q", "v", "o", "f1", "f2")


def _lora_data(rng, batch, seq, model, heads, rank, layers):
    ffn = 4 * model
    shapes = {"q": (model, model), "k": (model, model), "v": (model, model),
              "o": (model, model), "f1": (ffn, model), "f2": (model, ffn)}  # (out, in)
    d = {"x": _normal(rng, (batch, seq, model)), "heads": heads, "layers": []}
    for _ in range(layers):
        L = {"ln1": 1 + _normal(rng, model, 0.1), "ln2": 1 + _normal(rng, model, 0.1)}
        for k, (o, i) in shapes.items():
            L["W" + k] = _normal(rng, (o, i), 1 / math.sqrt(i))
            if k in _LORA_ON:
                L["A" + k] = _normal(rng, (rank, i), 1 / math.sqrt(i))
                L["B" + k] = _normal(rng, (o, rank), 0.1)  # non-zero so every path has work
        d["layers"].append(L)
    return d


def _lora_run(d, params, lib, F_, const, gelu, attend):
    x = const(d["x"])
    bsz, seq, model = d["x"].shape
    heads = d["heads"]
    dh = model // heads

    def proj(h, L, P, k):
        y = F_.linear(h, L["W" + k])
        if k in _LORA_ON:
            y = y + F_.linear(F_.linear(h, P["A" + k]), P["B" + k]) * 2.0
        return y

    def split(t):
        return t.reshape(bsz, seq, heads, dh).transpose(1, 2)

    for L, P in zip(d["layers"], params):
        h = F_.layer_norm(x, (model,), L["ln1t"])
        q, k, v = (split(proj(h, L, P, n)) for n in ("q", "k", "v"))
        a = attend(q, k, v).transpose(1, 2).reshape(bsz, seq, model)
        x = x + proj(a, L, P, "o")
        h = F_.layer_norm(x, (model,), L["ln2t"])
        x = x + proj(gelu(proj(h, L, P, "f1")), L, P, "f2")
    return lib.mean(x * x)


def _lora_frozen(d, const):
    """Frozen base weights as constants (no grad), made once per build."""
    out = []
    for L in d["layers"]:
        F_ = {k: const(v) for k, v in L.items() if k[0] == "W"}
        F_["ln1t"], F_["ln2t"] = const(L["ln1"]), const(L["ln2"])
        out.append(F_)
    return out


def _lora_adapters(d, leaf):
    return [{k: leaf(v) for k, v in L.items() if k[0] in "AB"} for L in d["layers"]]


def _lora(d):
    params = _lora_adapters(d, _leaf)
    dd = dict(d, layers=_lora_frozen(d, _const))
    loss = _lora_run(dd, params, pa, F, _const, F.gelu,
                     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return loss, [t for P in params for t in P.values()]


def _lora_torch(d):
    import torch
    import torch.nn.functional as TF
    params = _lora_adapters(d, _tleaf)
    dd = dict(d, layers=_lora_frozen(d, torch.from_numpy))
    loss = _lora_run(dd, params, torch, TF, torch.from_numpy,
                     TF.gelu,
                     lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True))
    return loss, [t for P in params for t in P.values()]


# ---- the registry -------------------------------------------------------------------------------
WORKLOADS = {w.name: w for w in [
    Workload("wide-matmul", "16 branches tanh(x @ A_i) @ B_i, summed; 256x256",
             {"full": dict(n=256, branches=16), "quick": dict(n=128, branches=16),
              "tiny": dict(n=16, branches=4)},
             _wide_matmul_data, _wide_matmul, _wide_matmul_torch),
    Workload("wide-elementwise", "32 chains of 6 elementwise ops on 200k vectors, summed",
             {"full": dict(n=200_000, branches=32), "quick": dict(n=50_000, branches=32),
              "tiny": dict(n=500, branches=4)},
             _wide_ew_data, _wide_ew, _wide_ew_torch),
    Workload("mlp-chain", "8 layers, batch 256, width 512, relu, mean squared output",
             {"full": dict(batch=256, width=512, layers=8),
              "quick": dict(batch=128, width=256, layers=8),
              "tiny": dict(batch=8, width=16, layers=3)},
             _mlp_data, _mlp, _mlp_torch, branches=False),
    Workload("tiny-nodes", "random DAG of ~3,000 elementwise nodes on 64-element vectors",
             {"full": dict(nodes=3000, vec=64, leaves=16, window=48),
              "quick": dict(nodes=1500, vec=64, leaves=16, window=48),
              "tiny": dict(nodes=60, vec=8, leaves=4, window=8)},
             _tiny_data, _tiny, _tiny_torch),
    Workload("attention", "batch 8, sequence 128, model 256, 8 heads as branches, out proj",
             {"full": dict(batch=8, seq=128, model=256, heads=8),
              "quick": dict(batch=2, seq=128, model=256, heads=8),
              "tiny": dict(batch=2, seq=8, model=16, heads=2)},
             _attention_data, _attention, _attention_torch),
    Workload("cnn", "conv3x3(3->16)-relu-pool, conv3x3(16->32)-relu-pool, linear, CE; "
             "batch 64, 32x32",
             {"full": dict(batch=64, image=32, c1=16, c2=32, classes=10),
              "quick": dict(batch=16, image=32, c1=16, c2=32, classes=10),
              "tiny": dict(batch=2, image=8, c1=2, c2=3, classes=3)},
             _cnn_data, _cnn, _cnn_torch, branches=False),
    Workload("lstm", "LSTM unrolled 32 steps, batch 32, input 64, hidden 128, per-gate matmuls",
             {"full": dict(batch=32, steps=32, inp=64, hidden=128),
              "quick": dict(batch=32, steps=16, inp=64, hidden=128),
              "tiny": dict(batch=2, steps=3, inp=4, hidden=5)},
             _lstm_data, _lstm, _lstm_torch, branches=False),
    Workload("transformer-lora", "2 frozen pre-norm blocks (batch 4, seq 128, model 256, "
             "4 heads), rank-8 adapters on q, v, o, ffn",
             {"full": dict(batch=4, seq=128, model=256, heads=4, rank=8, layers=2),
              "quick": dict(batch=1, seq=64, model=256, heads=4, rank=8, layers=2),
              "tiny": dict(batch=1, seq=4, model=8, heads=2, rank=2, layers=1)},
             _lora_data, _lora, _lora_torch),
]}


def build(name: str, seed: int = 0, size: str = "full"):
    """The parallel_autograd graph of workload `name`: (loss, leaves)."""
    w = WORKLOADS[name]
    return w.build(w.data(seed, size))


def build_torch(name: str, seed: int = 0, size: str = "full"):
    """The same graph on the same data with PyTorch (float64, CPU): (loss, leaves)."""
    w = WORKLOADS[name]
    return w.build_torch(w.data(seed, size))


def _shortcuts():
    for name in WORKLOADS:
        ident = name.replace("-", "_")

        def f(seed=0, size="full", _n=name):
            return build(_n, seed, size)

        def ft(seed=0, size="full", _n=name):
            return build_torch(_n, seed, size)

        f.__name__, ft.__name__ = ident, ident + "_torch"
        f.__doc__ = f"{WORKLOADS[name].description}: (loss, leaves)."
        ft.__doc__ = f"PyTorch version of {name}: (loss, leaves)."
        globals()[f.__name__], globals()[ft.__name__] = f, ft


_shortcuts()
