"""nn.functional with the caching allocator: outputs, gradients and temporaries come from
cached blocks, the results are bitwise those computed with caching off (every layout,
float32 included, where a GEMM's bits depend on its operands' orientation), and a
training step of functional ops stops taking new blocks after its first steps."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd import memory
from conftest import assert_bitwise

pytestmark = pytest.mark.skipif(not memory._GIL, reason="the cache is off without the GIL")


def _arr(shape, seed, dtype, layout):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if layout == "reversed":             # the same values, every axis's stride reversed
        b = np.empty(shape[::-1], dtype).T
        b[...] = a
        return b
    return a


_TARGET = np.random.default_rng(4).integers(0, 500, 200)
_TARGET[::7] = -100
_IDX = np.random.default_rng(5).integers(-400, 400, (32, 40))
_BOOL_MASK = np.random.default_rng(6).random((96, 80)) > 0.3
_BOOL_MASK[:, 0] = True

# name -> (fn of tensors, input shapes): each input requires grad, all large enough
# (>= 64 KiB) for the cache
CASES = {
    "linear": (F.linear, [(8, 64, 96), (128, 96), (128,)]),
    "conv2d_same": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
                    [(8, 16, 24, 20), (32, 16, 3, 3), (32,)]),
    "conv2d_stride2": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                       [(8, 8, 24, 20), (16, 8, 3, 3), (16,)]),
    "conv2d_small_weight": (lambda x, w: F.conv2d(x, w, padding=1),
                            [(8, 3, 32, 32), (8, 3, 3, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(8, 16, 32, 32)]),
    "max_pool2d_padded": (lambda x: F.max_pool2d(x, 3, 2, 1), [(8, 16, 32, 32)]),
    "avg_pool2d_overlap": (lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False),
                           [(8, 16, 32, 32)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (256,), w, b),
                   [(32, 64, 256), (256,), (256,)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (256,), w), [(32, 64, 256), (256,)]),
    "dropout": (lambda x: F.dropout(x, 0.3, seed=5), [(300, 500)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, _TARGET, label_smoothing=0.1),
                      [(200, 500)]),
    "cross_entropy_weighted": (lambda x, w: F.cross_entropy(x, _TARGET, w.detach(),
                                                            label_smoothing=0.1),
                               [(200, 500), (500,)]),
    "nll_loss": (lambda x: F.nll_loss(x, _TARGET, reduction="sum"), [(200, 500)]),
    "embedding": (lambda w: F.embedding(_IDX, w, padding_idx=3), [(400, 300)]),
    "sdpa": (F.scaled_dot_product_attention, [(4, 8, 96, 32), (4, 8, 80, 32), (4, 8, 80, 40)]),
    "sdpa_causal_dropout": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, dropout_p=0.2, seed=7), [(4, 8, 96, 32)] * 3),
    "sdpa_bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=_BOOL_MASK), [(4, 8, 96, 32), (4, 8, 80, 32), (4, 8, 80, 40)]),
    "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                        [(4, 8, 96, 32), (4, 8, 80, 32), (4, 8, 80, 40), (96, 80)]),
}


def _run(fn, shapes, dtype, layout):
    leaves = [pa.tensor(_arr(s, i, dtype, layout if len(s) > 1 else "c"), requires_grad=True)
              for i, s in enumerate(shapes)]
    out = fn(*leaves)
    seed = np.random.default_rng(1).standard_normal(out.shape).astype(out.dtype)
    pa.backward(pa.sum(out * pa.tensor(seed)) if out.ndim else out)
    return out.numpy(), [None if t.grad is None else t.grad.numpy() for t in leaves]


@pytest.mark.parametrize("layout", ["c", "reversed"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_results_are_bitwise_those_without_caching(name, dtype, layout):
    fn, shapes = CASES[name]
    with memory.caching_disabled():
        ref_out, ref_grads = _run(fn, shapes, dtype, layout)
    out, grads = _run(fn, shapes, dtype, layout)
    assert_bitwise([ref_out] + ref_grads, [out] + grads, "output and gradients")


@pytest.mark.parametrize("name", ["linear", "conv2d_same", "max_pool2d", "layer_norm",
                                  "rms_norm", "dropout", "embedding", "sdpa"])
def test_outputs_come_from_cached_blocks(name):
    fn, shapes = CASES[name]
    leaves = [pa.tensor(_arr(s, i, np.float64, "c"), requires_grad=True)
              for i, s in enumerate(shapes)]
    out = fn(*leaves)
    assert memory.is_block(out.numpy().base)


def test_a_functional_training_step_stops_taking_new_blocks():
    rng = np.random.default_rng(0)
    x = pa.tensor(rng.standard_normal((8, 3, 32, 32)))
    y = rng.integers(0, 10, 8)
    idx = rng.integers(0, 300, (8, 64))
    p = {k: pa.tensor(rng.standard_normal(s) * 0.1, requires_grad=True) for k, s in [
        ("w1", (16, 3, 3, 3)), ("b1", (16,)), ("w2", (32, 16, 3, 3)), ("b2", (32,)),
        ("wf", (10, 32 * 8 * 8 + 64)), ("emb", (300, 64)), ("ln", (64,)),
        ("wq", (64, 64))]}
    misses = []
    for _ in range(4):
        h = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"], padding=1)), 2)
        h = F.avg_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
        e = F.layer_norm(F.embedding(idx, p["emb"]), (64,), p["ln"])
        q = F.linear(e, p["wq"]).reshape(8, 64, 4, 16).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=0.1, seed=1)
        a = F.dropout(a.transpose(1, 2).reshape(8, 64, 64), 0.1, seed=2)
        feats = pa.cat([h.reshape(8, -1), a.mean(axis=2)], 1)
        loss = F.cross_entropy(F.linear(feats, p["wf"]), y)
        pa.backward(loss)
        del h, e, q, a, feats, loss
        for t in p.values():
            t.grad = None
        misses.append(memory.stats()["misses"])
    assert misses[1] == misses[2] == misses[3], misses
