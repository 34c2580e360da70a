"""Seeded graph generators for the stress harness.

Every family is a function `gen(ctx) -> root` that builds a graph from the leaves
it asks `ctx` for. Everything (shapes, data, structure) comes from `ctx.rng`, so
`build(family, seed, scale)` called twice gives two graphs that are identical in
structure and values but have their own nodes and leaves; with `shared=` the leaf
tensors themselves are shared (the concurrency mode's graphs over common leaves).

`scale` shrinks or grows the graphs (1.0 is the default profile, with a 100,000-node
deep chain; the test suite uses a small fraction).
"""
from __future__ import annotations

import math

import numpy as np

import parallel_autograd as pa

F = pa.nn.functional


class Ctx:
    """What a generator draws from: the seeded rng, the scale, and leaf creation."""

    def __init__(self, seed: int, scale: float = 1.0, shared: dict | None = None):
        self.rng = np.random.default_rng(seed)
        self.scale = scale
        self.leaves = []   # every leaf tensor made for this graph (requiring grad or not)
        self.extras = []   # intermediate tensors that grad() may ask about
        self._shared = shared
        self._count = 0

    # ---- random choices ----------------------------------------------------------
    def size(self, lo: int, hi: int, minimum: int = 1) -> int:
        """A node count in [lo, hi] scaled by `scale` (at least `minimum`)."""
        lo_s = max(minimum, int(round(lo * self.scale)))
        hi_s = max(lo_s, int(round(hi * self.scale)))
        return int(self.rng.integers(lo_s, hi_s + 1))

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    # ---- tensors -----------------------------------------------------------------
    def leaf(self, shape, requires_grad: bool = True, dtype=np.float64, std: float = 1.0):
        """A leaf with N(0, std^2) data. With a shared pool the k-th request of every
        graph built from the same seed returns the same tensor."""
        data = np.asarray(self.rng.standard_normal(shape) * std, dtype=dtype)
        k = self._count
        self._count += 1
        if self._shared is not None:
            t = self._shared.get(k)
            if t is None:
                t = self._shared[k] = pa.tensor(data, requires_grad=requires_grad)
        else:
            t = pa.tensor(data, requires_grad=requires_grad)
        self.leaves.append(t)
        return t

    def const(self, shape, dtype=np.float64, std: float = 1.0) -> np.ndarray:
        return np.asarray(self.rng.standard_normal(shape) * std, dtype=dtype)

    def mark(self, t):
        """Offer an intermediate tensor as a grad() input."""
        if isinstance(t, pa.Tensor) and t.requires_grad and len(self.extras) < 16:
            self.extras.append(t)
        return t


class Case:
    """One built graph: `root` (backward from it with `seed_grad`), its leaves, and
    intermediates usable as grad() inputs."""

    def __init__(self, family, seed, root, seed_grad, leaves, extras):
        self.family = family
        self.seed = seed
        self.root = root
        self.seed_grad = seed_grad
        self.leaves = leaves
        self.extras = extras
        self.nodes = count_nodes(root)

    @property
    def grad_leaves(self):
        return [t for t in self.leaves if t.requires_grad]


def build(family: str, seed: int, scale: float = 1.0, shared: dict | None = None,
          families: dict | None = None) -> Case:
    """Build graph number `seed` of `family` (deterministic in `seed` and `scale`)."""
    gen = (families or FAMILIES)[family]
    ctx = Ctx(seed, scale, shared)
    root = gen(ctx)
    if not root.requires_grad:  # every leaf frozen by chance: make one trainable
        root = root + ctx.leaf(root.shape, dtype=root.dtype)
    seed_grad = None
    if root.numel() != 1 or ctx.coin(0.5):
        seed_grad = ctx.const(root.shape, dtype=root.dtype)
    # leaves may repeat with a shared pool; keep the first occurrence of each
    leaves = list({id(t): t for t in ctx.leaves}.values())
    return Case(family, seed, root, seed_grad, leaves, ctx.extras)


def walk(root) -> list:
    """Every node reachable from `root` (iterative), in increasing creation order."""
    start = root.grad_fn if root.grad_fn is not None else None
    if start is None:
        return []
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt in node.next_nodes:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return sorted(seen, key=lambda n: n.seq)


def count_nodes(root) -> int:
    return len(walk(root))


# ---- building blocks ---------------------------------------------------------------------
class ScaledTanh(pa.Function):
    """A user Function (joint rule) so that path is stressed too."""

    @staticmethod
    def forward(ctx, x, scale):
        y = np.tanh(x) * scale
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        s = ctx.scale
        return g * (s - y * y / s), None


def scaled_tanh(x, scale):
    """`ScaledTanh.apply(x, scale)`. In a create_graph pass its backward runs on Tensors
    (`y`, the output it saved, on the graph): the user-Function path of higher orders."""
    return ScaledTanh.apply(x, scale)


softsign = pa.primitive("softsign", lambda x: x / (1 + np.abs(x)),
                        lambda g, ans, x: g / (1 + np.abs(x)) ** 2)
softsign.vjps[0].graph = lambda g, ans, x: g / (1 + pa.abs(x)) ** 2  # create_graph's form


def _squash(ctx, x):
    """A bounded unary op chosen at random (keeps values in a sane range)."""
    k = ctx.int(0, 9)
    if k == 0:
        return pa.tanh(x)
    if k == 1:
        return pa.sin(x)
    if k == 2:
        return pa.sigmoid(x)
    if k == 3:
        return softsign(x)
    if k == 4:
        return scaled_tanh(x, 0.9)
    if k == 5:
        return pa.log(x * x + 1.0)
    if k == 6:
        return pa.sqrt(x * x + 1.0) - 1.0
    if k == 7:
        return pa.gelu(pa.clip(x, -4.0, 4.0))
    if k == 8:
        return pa.leaky_relu(pa.tanh(x), 0.1)
    return pa.cos(x) * 0.5


def _combine(ctx, xs):
    """Combine 1-3 same-shaped tensors into one (bounded)."""
    if len(xs) == 1:
        return _squash(ctx, xs[0])
    a, b = xs[0], xs[1]
    k = ctx.int(0, 6)
    if k == 0:
        y = pa.tanh(a + b)
    elif k == 1:
        y = a * pa.sigmoid(b)
    elif k == 2:
        y = pa.sin(a - b)
    elif k == 3:
        y = pa.maximum(a, b) * 0.5
    elif k == 4:
        y = pa.minimum(a, b) * 0.5 + pa.tanh(b) * 0.25
    elif k == 5:
        y = pa.where(a.data > b.data, pa.tanh(a), b * 0.5)
    else:
        y = pa.tanh(a * b)
    for c in xs[2:]:
        y = pa.tanh(y + c * 0.5)
    return y


def _shape_mix(ctx, x, shape):
    """A shape-op detour that returns to `shape` (concat/split, getitem, reshape, ...)."""
    k = ctx.int(0, 5)
    if k == 0 and len(shape) >= 1 and shape[-1] >= 2:
        n = shape[-1]
        cut = ctx.int(1, n - 1)
        lo = x[..., :cut]
        hi = x[..., cut:]
        return pa.concat([pa.tanh(lo), hi * 0.5], axis=-1)
    if k == 1 and len(shape) >= 1 and shape[0] >= 2:
        parts = pa.split(x, ctx.int(1, shape[0] - 1), axis=0)
        return pa.concat([pa.sin(p) for p in parts], axis=0)
    if k == 2:
        return pa.reshape(pa.tanh(pa.reshape(x, (-1,))), shape)
    if k == 3 and len(shape) == 2:
        return pa.transpose(pa.sigmoid(pa.transpose(x, 0, 1)), 0, 1)  # (PyTorch's dims)
    if k == 4:
        return pa.stack([x, pa.tanh(x)], axis=0).sum(axis=0) * 0.5
    # normalise along the last axis (reduce + broadcast)
    return pa.tanh(x - x.mean(axis=-1, keepdims=True))


def _to_scalar(ctx, x):
    k = ctx.int(0, 2)
    if k == 0:
        return x.sum()
    if k == 1:
        return x.mean()
    return (x * x).sum() * 0.5


# ---- families ------------------------------------------------------------------------------
_RANDOM_SHAPES = [(7,), (4, 5), (16, 16), (3, 4, 5), (48, 48), (1,), (2048,)]


def gen_random(ctx, require_p: float = 1.0, detach_p: float = 0.0):
    """A random DAG: each node takes 1-3 inputs from a window of recent nodes."""
    n = ctx.size(40, 1200, minimum=8)
    width = ctx.int(1, 32)
    fan_in = ctx.int(1, 3)
    shape = ctx.pick(_RANDOM_SHAPES)
    nleaves = ctx.int(1, 12)
    leaves = [ctx.leaf(shape, requires_grad=ctx.coin(require_p) or i == 0,
                       dtype=np.float32 if ctx.coin(0.15) else np.float64)
              for i in range(nleaves)]
    pool = list(leaves)
    used = set()
    square = len(shape) == 2 and shape[0] == shape[1]
    weight = ctx.leaf((shape[1], shape[1]), std=1 / math.sqrt(shape[1])) if square else None
    for _ in range(n):
        window = pool[-width - nleaves:] if ctx.coin(0.8) else pool
        xs = [ctx.pick(window) for _ in range(ctx.int(1, fan_in))]
        for x in xs:
            used.add(id(x))
        r = ctx.rng.random()
        if square and r < 0.1:
            y = pa.tanh(xs[0] @ weight)
        elif r < 0.2:
            y = _shape_mix(ctx, xs[0], shape)
        elif r < 0.25:
            y = pa.tanh(xs[0] * ctx.leaf(shape[-1:] if shape else ()))  # broadcast leaf
        else:
            y = _combine(ctx, xs)
        if detach_p and ctx.coin(detach_p):
            y = y.detach() if ctx.coin() else _no_grad_copy(y)
        if ctx.coin(0.02):
            ctx.mark(y)
        pool.append(y)
    sinks = [t for t in pool[nleaves:] if id(t) not in used and t.requires_grad] or [pool[-1]]
    total = None
    for s in sinks:
        term = _to_scalar(ctx, s) if ctx.coin(0.7) else s
        total = term if total is None else total + term
    if total.numel() != 1 and ctx.coin(0.5):
        total = total.sum()
    return total


def _no_grad_copy(y):
    with pa.no_grad():
        return y * 1.0


def gen_partial(ctx):
    """Random DAG where only some leaves require grad and some values are detached."""
    return gen_random(ctx, require_p=0.4, detach_p=0.03)


def gen_wide(ctx):
    """One input fanned out to many heavy branches, joined at the end."""
    k = ctx.size(8, 64, minimum=4)
    b = ctx.int(4, 32)
    d = ctx.pick([16, 32, 64, 96])
    x = ctx.leaf((b, d))
    shared_w = ctx.leaf((d, d), std=1 / math.sqrt(d)) if ctx.coin(0.3) else None
    outs = []
    for _ in range(k):
        w = shared_w if shared_w is not None and ctx.coin(0.5) else \
            ctx.leaf((d, d), std=1 / math.sqrt(d), requires_grad=ctx.coin(0.9))
        h = pa.tanh(x @ w)
        for _ in range(ctx.int(0, 3)):
            h = _squash(ctx, h) if ctx.coin(0.7) else h * ctx.leaf((d,))
        outs.append(ctx.mark(h) if ctx.coin(0.1) else h)
    join = ctx.int(0, 2)
    if join == 0:
        y = outs[0]
        for h in outs[1:]:
            y = y + h
    elif join == 1:
        y = pa.stack(outs, axis=0).sum(axis=0)
    else:
        y = pa.concat(outs, axis=1)
    return _to_scalar(ctx, y) if ctx.coin(0.7) else y


def gen_deep(ctx):
    """A long chain (100,000 nodes at scale 1) through a few shared leaves."""
    n = ctx.size(100_000, 100_000, minimum=200)
    shape = ctx.pick([(4,), (3, 2), (8,)])
    x = ctx.leaf(shape)
    w = ctx.leaf(shape, std=0.1)
    period = ctx.int(500, 5000)
    y = x
    extra = None
    for i in range(n):
        if i % 2 == 0:
            y = pa.sin(y)
        elif i % period == 1:
            extra = ctx.leaf(shape, std=0.1)
            y = y + extra
        else:
            y = y + w
    if extra is not None:
        ctx.mark(y)
    return y.sum() if ctx.coin(0.7) else y


def gen_diamond(ctx):
    """Stacked diamonds with shared subexpressions reused by later layers."""
    levels = ctx.size(10, 400, minimum=4)
    shape = ctx.pick([(6,), (8, 8), (32, 32), (4096,)])
    x = ctx.leaf(shape)
    w1, w2 = ctx.leaf(shape[-1:]), ctx.leaf(shape[-1:])
    shared = [pa.tanh(x * w1)]
    for _ in range(levels):
        a = pa.tanh(x * w1) if ctx.coin() else pa.sin(x + w2)
        b = pa.sigmoid(x - w2) if ctx.coin() else pa.cos(x) * 0.5
        x = pa.tanh(a * b + (a - b) * 0.5)
        if ctx.coin(0.3):
            x = x + ctx.pick(shared) * 0.1       # reuse an earlier subexpression
        if ctx.coin(0.1):
            shared.append(x)
        if ctx.coin(0.05):
            ctx.mark(x)
    s = shared[0]
    return _to_scalar(ctx, x + s * s) if ctx.coin(0.8) else x + s


def gen_shared(ctx):
    """A few leaves used by many branches (heavy accumulation into the same leaves)."""
    nl = ctx.int(2, 6)
    nb = ctx.size(20, 300, minimum=4)
    shape = ctx.pick([(5,), (16, 16), (64, 64), (1000,)])
    leaves = [ctx.leaf(shape, dtype=np.float32 if ctx.coin(0.2) else np.float64)
              for _ in range(nl)]
    total = None
    for _ in range(nb):
        ls = [ctx.pick(leaves) for _ in range(ctx.int(1, 4))]
        h = _combine(ctx, ls)
        if ctx.coin(0.3):
            h = _squash(ctx, h)
        total = h if total is None else total + h
    return _to_scalar(ctx, total) if ctx.coin(0.7) else total


def gen_broadcast(ctx):
    """Mixed shapes and dtypes that broadcast against each other."""
    A, B, C = ctx.int(1, 6), ctx.int(1, 7), ctx.int(2, 8)
    shapes = [(A, B, C), (B, C), (C,), (1, B, 1), (A, 1, C), (), (1, 1, 1), (A, B, 1)]
    n = ctx.size(10, 200, minimum=6)
    leaves = [ctx.leaf(ctx.pick(shapes), dtype=np.float32 if ctx.coin(0.3) else np.float64)
              for _ in range(ctx.int(3, 8))]
    pool = list(leaves)
    for _ in range(n):
        a, b = ctx.pick(pool), ctx.pick(pool)
        k = ctx.int(0, 7)
        if k == 0:
            y = pa.tanh(a * b)
        elif k == 1:
            y = pa.sin(a + b)
        elif k == 2:
            y = pa.tanh(pa.broadcast_to(a, np.broadcast_shapes(a.shape, (A, B, C))))
        elif k == 3 and a.ndim == 3:
            y = a.sum(axis=ctx.int(0, 2), keepdims=True)
        elif k == 4 and a.ndim == 3:
            y = pa.permute(pa.permute(a, (2, 0, 1)).mean(axis=0, keepdims=True), (1, 2, 0))
        elif k == 5:
            y = pa.sigmoid(a) - b * 0.5
        elif k == 6 and a.ndim == 3:
            y = pa.expand(pa.unsqueeze(a, 0), 2, *a.shape) * 0.5
        else:
            y = a / (1.0 + b * b)
        if ctx.coin(0.05):
            ctx.mark(y)
        pool.append(y)
    total = None
    for t in pool[-ctx.int(1, 6):]:
        full = np.broadcast_shapes(t.shape, (A, B, C))
        s = t.sum() if ctx.coin(0.7) else pa.broadcast_to(t, full)
        total = s if total is None else total + s
    return total


def gen_mlp(ctx):
    """A multi-layer perceptron with an MSE or cross-entropy loss."""
    depth = ctx.int(1, 6)
    dims = [ctx.pick([8, 16, 32, 64, 128]) for _ in range(depth + 1)]
    batch = ctx.pick([4, 16, 64])
    x = ctx.leaf((batch, dims[0]), requires_grad=ctx.coin(0.3))
    h = x
    for i in range(depth):
        w = ctx.leaf((dims[i + 1], dims[i]), std=1 / math.sqrt(dims[i]),
                     requires_grad=ctx.coin(0.9))
        b = ctx.leaf((dims[i + 1],), std=0.1) if ctx.coin(0.8) else None
        h = F.linear(h, w, b)
        if i < depth - 1:
            h = ctx.pick([F.relu, F.gelu, F.tanh, F.silu, F.sigmoid])(h)
        if ctx.coin(0.2):
            ctx.mark(h)
    if ctx.coin():
        target = ctx.const(h.shape)
        return F.mse_loss(h, pa.tensor(target))
    labels = ctx.rng.integers(0, dims[-1], size=batch)
    return F.cross_entropy(h, pa.tensor(labels))


def gen_cnn(ctx):
    """conv -> relu -> pool -> conv -> global pool -> linear -> cross-entropy."""
    n, c, hw = ctx.int(1, 4), ctx.int(1, 3), ctx.pick([6, 8, 12])
    o1, o2, classes = ctx.int(2, 8), ctx.int(2, 8), ctx.int(2, 6)
    x = ctx.leaf((n, c, hw, hw), requires_grad=ctx.coin(0.3))
    w1 = ctx.leaf((o1, c, 3, 3), std=0.3)
    b1 = ctx.leaf((o1,), std=0.1)
    w2 = ctx.leaf((o2, o1, 3, 3), std=0.3, requires_grad=ctx.coin(0.8))
    h = F.relu(F.conv2d(x, w1, b1, padding=1))
    h = F.max_pool2d(h, 2) if ctx.coin() else F.avg_pool2d(h, 2)
    h = F.conv2d(h, w2, None, stride=ctx.pick([1, 2]), padding=1)
    ctx.mark(h)
    h = F.gelu(h).mean(axis=(2, 3))
    wl = ctx.leaf((classes, o2), std=0.5)
    logits = F.linear(h, wl)
    return F.cross_entropy(logits, pa.tensor(ctx.rng.integers(0, classes, size=n)))


def gen_transformer(ctx):
    """A transformer block with frozen weights and trainable LoRA adapters."""
    b, t = ctx.int(1, 3), ctx.pick([4, 8, 16])
    heads = ctx.pick([1, 2, 4])
    d = heads * ctx.pick([4, 8, 16])
    r = ctx.int(1, 4)
    x = ctx.leaf((b, t, d), requires_grad=ctx.coin(0.5))

    def frozen(shape):
        return ctx.leaf(shape, requires_grad=False, std=1 / math.sqrt(shape[-1]))

    def adapted(inp, w):
        y = F.linear(inp, w)
        if ctx.coin(0.7):  # LoRA: y + (inp @ A) @ B
            a = ctx.leaf((d, r), std=0.1)
            bb = ctx.leaf((r, w.shape[0]), std=0.1)
            y = y + (inp @ a) @ bb
        return y

    g1, be1 = ctx.leaf((d,), std=0.1), ctx.leaf((d,), std=0.1)
    h = F.layer_norm(x, (d,), g1 + 1.0, be1)
    q = adapted(h, frozen((d, d)))
    k = adapted(h, frozen((d, d)))
    v = adapted(h, frozen((d, d)))

    def split_heads(z):
        return pa.permute(pa.reshape(z, (b, t, heads, d // heads)), (0, 2, 1, 3))

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    if ctx.coin():
        att = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.coin())
    else:
        scores = q @ pa.swapaxes(k, -1, -2) * (1.0 / math.sqrt(d // heads))
        mask = np.triu(np.full((t, t), -1e9), 1)
        att = pa.softmax(scores + mask, axis=-1) @ v
    att = pa.reshape(pa.permute(att, (0, 2, 1, 3)), (b, t, d))
    x2 = x + adapted(att, frozen((d, d)))
    ctx.mark(x2)
    h2 = F.layer_norm(x2, (d,))
    m = F.gelu(adapted(h2, frozen((4 * d, d))))
    out = x2 + F.linear(m, frozen((d, 4 * d)))
    return (out * out).mean() if ctx.coin(0.7) else out


def gen_lstm(ctx):
    """An LSTM unrolled over time: the same weights receive one gradient per step."""
    steps = ctx.size(5, 60, minimum=3)
    b, i, h = ctx.int(1, 8), ctx.pick([4, 8, 16]), ctx.pick([4, 8, 16, 32])
    wx = ctx.leaf((i, 4 * h), std=1 / math.sqrt(i))
    wh = ctx.leaf((h, 4 * h), std=1 / math.sqrt(h))
    bias = ctx.leaf((4 * h,), std=0.1)
    xs = ctx.leaf((steps, b, i), requires_grad=ctx.coin(0.3))
    hs = ctx.leaf((b, h), std=0.1, requires_grad=ctx.coin(0.3))
    cs = pa.tensor(np.zeros((b, h)))
    outs = []
    for s in range(steps):
        z = xs[s] @ wx + hs @ wh + bias
        gi, gf, gg, go = pa.split(z, h, axis=1)
        cs = pa.sigmoid(gf) * cs + pa.sigmoid(gi) * pa.tanh(gg)
        hs = pa.sigmoid(go) * pa.tanh(cs)
        if ctx.coin(0.05):
            ctx.mark(hs)
        outs.append(hs)
    y = pa.stack(outs, axis=0)
    v = ctx.leaf((h,), std=0.5)
    return ((y * v).sum(axis=-1) ** 2).mean()


# Concurrency and fault checks build each graph several times: smaller there.
AUX_FACTOR = {"deep": 0.2}

FAMILIES = {
    "random": gen_random,
    "wide": gen_wide,
    "deep": gen_deep,
    "diamond": gen_diamond,
    "shared": gen_shared,
    "broadcast": gen_broadcast,
    "mlp": gen_mlp,
    "cnn": gen_cnn,
    "transformer": gen_transformer,
    "lstm": gen_lstm,
    "partial": gen_partial,
}
