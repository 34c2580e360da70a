"""Synthetic workloads, shaped to exercise the scheduler: wide-matmul, wide-elementwise,
mlp-chain and tiny-nodes. Each is `*_data(rng, **dims)` and one definition
`(data, backend) -> (loss, leaves)` (see `stress.compare.backend`)."""
from __future__ import annotations

import math

from .backend import normal


# ---- wide-matmul: 16 branches tanh(x @ A_i) @ B_i, summed --------------------------------
def wide_matmul_data(rng, n, branches):
    return {"x": normal(rng, (n, n)),
            "A": normal(rng, (branches, n, n), 1 / math.sqrt(n)),
            "B": normal(rng, (branches, n, n), 1 / math.sqrt(n))}


def _summed_branches(d, B, keys, branch):
    """Leaves x = d["x"] and, per branch, one of each of d[keys[0]] and d[keys[1]];
    the loss is the sum over branches of `branch(B, x, p, q)`, summed to a scalar."""
    x = B.leaf(d["x"])
    ps, qs = ([B.leaf(v) for v in d[k]] for k in keys)
    out = None
    for p, q in zip(ps, qs):
        y = branch(B, x, p, q)
        out = y if out is None else out + y
    return out.sum(), [x, *ps, *qs]


def wide_matmul(d, B):
    return _summed_branches(d, B, ("A", "B"), lambda B, x, a, b: B.lib.tanh(x @ a) @ b)


# ---- wide-elementwise: 32 chains of 6 elementwise ops, summed -------------------------------
def wide_ew_data(rng, n, branches):
    return {"x": normal(rng, n),
            "a": 0.5 + rng.random(branches),          # one scale parameter per branch
            "b": normal(rng, (branches, n), 0.1)}    # one bias vector per branch


def _ew_chain(B, x, a, b):
    h = x * a                 # scale by a parameter
    h = B.lib.sin(h)
    h = B.lib.exp(h * 0.5)    # exp of a scaled value
    h = h + b                 # add
    h = B.lib.tanh(h)
    return h * h              # square


def wide_ew(d, B):
    return _summed_branches(d, B, ("a", "b"), _ew_chain)


# ---- mlp-chain: 8 layers, relu, mean squared output -----------------------------------------
def mlp_data(rng, batch, width, layers):
    return {"x": normal(rng, (batch, width)),
            "W": normal(rng, (layers, width, width), math.sqrt(2 / width)),
            "b": normal(rng, (layers, width), 0.01)}


def mlp(d, B):
    h = B.const(d["x"])
    W = [B.leaf(w) for w in d["W"]]
    b = [B.leaf(v) for v in d["b"]]
    for i, (w, bi) in enumerate(zip(W, b)):
        h = h @ w + bi
        if i < len(W) - 1:
            h = B.lib.relu(h)
    return B.lib.mean(h * h), [*W, *b]


# ---- tiny-nodes: a random DAG of small elementwise nodes -----------------------------------
_UNARY = ("sin", "tanh", "scale")
_BINARY = ("add", "sub", "mul")


def tiny_data(rng, nodes, vec, leaves, window):
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
    return {"leaves": normal(rng, (leaves, vec)), "ops": ops,
            "sinks": [i for i, c in enumerate(consumed) if not c]}


def tiny(d, B):
    leaves = [B.leaf(v) for v in d["leaves"]]
    values = list(leaves)
    for op, args in d["ops"]:
        xs = [values[i] for i in args]
        if op == "sin":
            v = B.lib.sin(xs[0])
        elif op == "tanh":
            v = B.lib.tanh(xs[0])
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
    return out.sum(), leaves

