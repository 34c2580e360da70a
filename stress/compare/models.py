"""Model-shaped workloads: attention, cnn, lstm and transformer-lora. Each is
`*_data(rng, **dims)` and one definition `(data, backend) -> (loss, leaves)` (see
`stress.compare.backend`)."""
from __future__ import annotations

import math

import numpy as np

from .backend import normal


# ---- attention: 8 heads as separate branches, output projection -------------------------------
# Projections go through `linear` (weights (out, in), as in PyTorch): one GEMM over
# batch x sequence rows, where a 3-D @ 2-D matmul would loop over the batch.
def attention_data(rng, batch, seq, model, heads):
    dh = model // heads
    s = 1 / math.sqrt(model)
    return {"x": normal(rng, (batch, seq, model)),
            "Wq": normal(rng, (heads, dh, model), s), "Wk": normal(rng, (heads, dh, model), s),
            "Wv": normal(rng, (heads, dh, model), s), "Wo": normal(rng, (model, model), s)}


def attention(d, B):
    x = B.leaf(d["x"])
    Wq, Wk, Wv = ([B.leaf(w) for w in d[k]] for k in ("Wq", "Wk", "Wv"))
    Wo = B.leaf(d["Wo"])
    scale = 1 / math.sqrt(Wq[0].shape[0])
    heads = []
    for wq, wk, wv in zip(Wq, Wk, Wv):
        q, k, v = B.F.linear(x, wq), B.F.linear(x, wk), B.F.linear(x, wv)
        p = B.F.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
        heads.append(p @ v)
    out = B.F.linear(B.lib.cat(heads, -1), Wo)
    return B.lib.mean(out * out), [x, *Wq, *Wk, *Wv, Wo]


# ---- cnn: conv-relu-pool twice, linear, cross-entropy ------------------------------------------
def cnn_data(rng, batch, image, c1, c2, classes):
    flat = c2 * (image // 4) ** 2
    return {"x": normal(rng, (batch, 3, image, image)),
            "w1": normal(rng, (c1, 3, 3, 3), math.sqrt(2 / 27)), "b1": np.zeros(c1),
            "w2": normal(rng, (c2, c1, 3, 3), math.sqrt(2 / (9 * c1))), "b2": np.zeros(c2),
            "wf": normal(rng, (classes, flat), 1 / math.sqrt(flat)), "bf": np.zeros(classes),
            "y": rng.integers(0, classes, batch)}


_CNN_PARAMS = ("w1", "b1", "w2", "b2", "wf", "bf")


def cnn(d, B):
    F_, p = B.F, {k: B.leaf(d[k]) for k in _CNN_PARAMS}
    h = F_.max_pool2d(F_.relu(F_.conv2d(B.const(d["x"]), p["w1"], p["b1"], padding=1)), 2)
    h = F_.max_pool2d(F_.relu(F_.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
    logits = F_.linear(B.lib.flatten(h, 1), p["wf"], p["bf"])
    return F_.cross_entropy(logits, B.const(d["y"])), list(p.values())


# ---- lstm: unrolled, one matmul pair per gate, readout of the last state ------------------------
_GATES = ("i", "f", "g", "o")
_LSTM_PARAMS = [k + g for k in ("W", "U", "b") for g in _GATES] + ["Wy"]


def lstm_data(rng, batch, steps, inp, hidden):
    d = {"x": normal(rng, (steps, batch, inp)), "y": normal(rng, (batch, 8)),
         "Wy": normal(rng, (hidden, 8), 1 / math.sqrt(hidden))}
    for g in _GATES:
        d["W" + g] = normal(rng, (inp, hidden), 1 / math.sqrt(inp))
        d["U" + g] = normal(rng, (hidden, hidden), 1 / math.sqrt(hidden))
        d["b" + g] = np.full(hidden, 1.0 if g == "f" else 0.0)
    return d


def lstm(d, B):
    lib, p = B.lib, {k: B.leaf(d[k]) for k in _LSTM_PARAMS}
    batch, hidden = d["x"].shape[1], d["Uf"].shape[0]
    h = c = B.const(np.zeros((batch, hidden)))
    for t in range(d["x"].shape[0]):
        xt = B.const(d["x"][t])
        z = {g: xt @ p["W" + g] + h @ p["U" + g] + p["b" + g] for g in _GATES}
        c = lib.sigmoid(z["f"]) * c + lib.sigmoid(z["i"]) * lib.tanh(z["g"])
        h = lib.sigmoid(z["o"]) * lib.tanh(c)
    e = h @ p["Wy"] - B.const(d["y"])
    return lib.mean(e * e), list(p.values())


# ---- transformer-lora: frozen pre-norm blocks, trainable low-rank adapters -----------------------
_LORA_ON = ("q", "v", "o", "f1", "f2")


def lora_data(rng, batch, seq, model, heads, rank, layers):
    ffn = 4 * model
    shapes = {"q": (model, model), "k": (model, model), "v": (model, model),
              "o": (model, model), "f1": (ffn, model), "f2": (model, ffn)}  # (out, in)
    d = {"x": normal(rng, (batch, seq, model)), "heads": heads, "layers": []}
    for _ in range(layers):
        L = {"ln1": 1 + normal(rng, model, 0.1), "ln2": 1 + normal(rng, model, 0.1)}
        for k, (o, i) in shapes.items():
            L["W" + k] = normal(rng, (o, i), 1 / math.sqrt(i))
            if k in _LORA_ON:
                L["A" + k] = normal(rng, (rank, i), 1 / math.sqrt(i))
                L["B" + k] = normal(rng, (o, rank), 0.1)  # non-zero so every path has work
        d["layers"].append(L)
    return d


def _lora_frozen(L, const):
    """One layer's frozen base weights and norm scales as constants (no grad)."""
    out = {k: const(v) for k, v in L.items() if k[0] == "W"}
    out["ln1"], out["ln2"] = const(L["ln1"]), const(L["ln2"])
    return out


def lora(d, B):
    F_ = B.F
    bsz, seq, model = d["x"].shape
    heads = d["heads"]
    frozen = [_lora_frozen(L, B.const) for L in d["layers"]]  # made once per build
    params = [{k: B.leaf(v) for k, v in L.items() if k[0] in "AB"} for L in d["layers"]]

    def proj(h, L, P, k):
        y = F_.linear(h, L["W" + k])
        if k in _LORA_ON:
            y = y + F_.linear(F_.linear(h, P["A" + k]), P["B" + k]) * 2.0
        return y

    def split(t):
        return t.reshape(bsz, seq, heads, model // heads).transpose(1, 2)

    x = B.const(d["x"])
    for L, P in zip(frozen, params):
        h = F_.layer_norm(x, (model,), L["ln1"])
        q, k, v = (split(proj(h, L, P, n)) for n in ("q", "k", "v"))
        a = F_.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + proj(a.transpose(1, 2).reshape(bsz, seq, model), L, P, "o")
        h = F_.layer_norm(x, (model,), L["ln2"])
        x = x + proj(F_.gelu(proj(h, L, P, "f1")), L, P, "f2")
    return B.lib.mean(x * x), [t for P in params for t in P.values()]

