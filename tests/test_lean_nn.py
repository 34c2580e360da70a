"""Allocation-lean nn ops (nn/_conv.py, nn/_pool.py, nn/_resample.py, nn/_recurrent.py
and the grouped-query path of scaled_dot_product_attention).

Each op's forward and each rule, called as the engine calls it (`vjp(g, *node.saved,
**node.kwargs)` or `joint(g, *node.saved)`), on inputs of a few MiB, allocates at most
what it returns (`conftest.temporary_bytes`) plus the scratch its kernel states:

- what the node saves for its rule (conv's columns, max pooling's first-maximum
  indices, the recurrences' activations, attention's weights): part of the result;
- conv: one chunk of im2col columns (at most `_conv._COLS_BYTES` of them) and that chunk's
  GEMM result, or for the input gradient a column buffer of at most the input's size
  (strided geometries: one chunk of samples' product, and of g channels-last, at most
  `_conv._GRAD_CHUNK_BYTES` together, and the weight reordered);
- pools: temporaries of one block of planes (`_pool._BLOCK_BYTES` of input planes);
- separable resampling: the intermediates between the axes' maps (one per axis but
  the first);
- the recurrences' joint rule: the stacked previous hidden states, the operand of W_hh's
  GEMM (and for the GRU the n gate's third of the hidden projection's gradient, dn r:
  its r and z parts are the projections' gradient).

SLACK covers Python objects and numpy's ufunc buffers (8192 elements per strided
operand): far below any full-size temporary of these inputs. Values and gradients are
checked in test_nn_conv.py, test_nn_pool.py, test_nn_rnn.py and test_nn_attention.py.
"""
import numpy as np
import pytest
from conftest import temporary_bytes

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from parallel_autograd.nn import _conv, _pool, _recurrent

SLACK = 256 * 1024
MiB = 1 << 20


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


def forward(fn, *args, **kwargs):
    """(output Tensor, the forward's temporaries)."""
    y, extra = temporary_bytes(fn, *args, **kwargs)
    return (y[0] if isinstance(y, tuple) else y), extra


def rule(y, i):
    """(gradient, temporaries) of y's node's rule for input i, called as the engine does."""
    node = y.grad_fn
    g = rand(y.shape, 11)
    return temporary_bytes(node.vjps[i], g, *node.saved, **(node.kwargs or {}))


def joint(y):
    node = y.grad_fn
    grads, extra = temporary_bytes(node.joint, rand(y.shape, 11), *node.saved,
                                   **(node.kwargs or {}))
    return [a for a in grads if a is not None], extra


# ---- convolution ---------------------------------------------------------------------------
def _obuf(o, ck, itemsize=8):
    """The forward's chunk GEMM result: (O, nb*P) for a chunk of <= _COLS_BYTES columns."""
    return _conv._COLS_BYTES * o // ck + o * 1024 * itemsize


def test_conv2d_same_flat_path():
    x, w, b = leaf(rand((16, 16, 32, 32), 1)), leaf(rand((32, 16, 3, 3), 2)), leaf(rand(32, 3))
    y, extra = forward(F.conv2d, x, w, b, padding=1)
    cols = y.grad_fn.saved[4]                 # kept for the weight gradient
    assert cols.nbytes == 9 * x.numpy().nbytes
    assert extra <= cols.nbytes + _obuf(32, 144) + SLACK
    gx, extra = rule(y, 0)                    # column buffer <= input, g's chunk
    assert extra <= gx.nbytes * (1 + 32 / 144) + SLACK
    gw, extra = rule(y, 1)                    # g's chunk (<= 1 MiB), a weight-sized product
    assert extra <= MiB + 2 * gw.nbytes + SLACK
    gb, extra = rule(y, 2)                    # (N, O) row sums
    assert extra <= 16 * 32 * 8 + SLACK


def test_conv2d_strided_channels_last_path():
    x, w = leaf(rand((16, 16, 32, 32), 1)), leaf(rand((32, 16, 3, 3), 2))
    y, extra = forward(F.conv2d, x, w, stride=2, padding=1)
    assert extra <= y.grad_fn.saved[4].nbytes + _obuf(32, 144) + SLACK
    assert not _conv._channels_first_pays(x.shape, w.shape, y.shape[2:], 1)
    # per chunk of 4 samples (_GRAD_MIN_ROWS output positions), g's chunk channels-last
    # (4, 16, 16, O) and the product of all 9 kernel offsets (4*16*16, 9*C), reused:
    # 1.4 MiB, not g and the whole batch's product (5.5 MiB); the weight reordered
    gx, extra = rule(y, 0)
    chunk = max(_conv._GRAD_CHUNK_BYTES, _conv._GRAD_MIN_ROWS * (32 + 9 * 16) * 8)
    assert extra <= chunk + w.numpy().nbytes + SLACK < y.numpy().nbytes * (1 + 9 * 16 // 32) // 2


@pytest.mark.parametrize("conv,xs,ws", [(F.conv2d, (16, 8, 64, 64), (16, 8, 3, 3)),
                                        (F.conv1d, (16, 16, 1024), (32, 16, 5))])
def test_conv_strided_channels_first_path(conv, xs, ws):
    x, w = leaf(rand(xs, 1)), leaf(rand(ws, 2))
    y, _ = forward(conv, x, w, stride=2, padding=1)
    assert _conv._channels_first_pays(xs, ws, y.shape[2:], 1)
    # per chunk of samples, its columns' gradient (C*K, nb*P), at most the input's size
    # (as the flat path's), and g's chunk (O, nb*P), reused; one GEMM a chunk
    gx, extra = rule(y, 0)
    assert gx.flags.c_contiguous
    o, ck = ws[0], ws[1] * int(np.prod(ws[2:]))
    assert extra <= gx.nbytes * (1 + o / ck) + SLACK


def test_conv1d_flat_path():
    x, w = leaf(rand((16, 16, 1024), 1)), leaf(rand((32, 16, 5), 2))
    y, extra = forward(F.conv1d, x, w, padding=2)
    assert extra <= y.grad_fn.saved[4].nbytes + _obuf(32, 80) + SLACK
    gx, extra = rule(y, 0)
    assert extra <= gx.nbytes * (1 + 32 / 80) + SLACK


def test_conv_frozen_weight_keeps_one_chunk_of_columns():
    x, w = leaf(rand((32, 16, 32, 32), 1)), pa.tensor(rand((32, 16, 3, 3), 2))
    y, extra = forward(F.conv2d, x, w, padding=1)
    assert y.grad_fn.saved[4] is None          # (ans, x, w, b, columns, geometry)
    assert extra <= _conv._COLS_BYTES + _obuf(32, 144) + SLACK < 9 * x.numpy().nbytes


def test_conv_transpose2d_and_its_rules():
    x, w, b = leaf(rand((16, 32, 16, 16), 1)), leaf(rand((32, 16, 3, 3), 2)), leaf(rand(16, 3))
    y, extra = forward(F.conv_transpose2d, x, w, b, stride=2, padding=1, output_padding=1)
    # conv's input gradient, channels-last: per chunk of 4 samples (_GRAD_MIN_ROWS
    # positions of x), x's chunk channels-last (4, 16, 16, 32) and the product of all
    # 9 kernel offsets (4*16*16, 9*16): 1.4 MiB, not x and the whole batch's (10 MiB)
    chunk = max(_conv._GRAD_CHUNK_BYTES, _conv._GRAD_MIN_ROWS * (32 + 9 * 16) * 8)
    assert extra <= chunk + w.numpy().nbytes + SLACK < 10 * MiB
    gx, extra = rule(y, 0)                    # conv2d without kept columns: one chunk
    assert extra <= _conv._COLS_BYTES + _obuf(32, 144) + SLACK
    gw, extra = rule(y, 1)
    # the weight gradient rebuilds the columns by chunks of g of <= 1 MiB (2^17
    # entries): C*K/O MiB of columns
    assert extra <= MiB + 16 * 9 * MiB // 32 + 2 * gw.nbytes + SLACK


def test_unfold_fold():
    x = leaf(rand((8, 16, 32, 32), 1))
    y, extra = forward(F.unfold, x, 3, padding=1)
    assert extra <= SLACK
    gx, extra = rule(y, 0)
    assert extra <= SLACK
    c = leaf(rand((8, 16 * 9, 1024), 1))
    y, extra = forward(F.fold, c, (32, 32), 3, padding=1)
    assert extra <= SLACK
    gc, extra = rule(y, 0)
    assert extra <= SLACK


# ---- pooling -------------------------------------------------------------------------------
POOL_X = rand((32, 32, 64, 64), 1)            # 32 MiB: 16 blocks of planes


@pytest.mark.parametrize("args", [(2,), (3, 2, 1), (3, 1, 1, 2)])
def test_max_pool2d(args):
    y, extra = forward(F.max_pool2d, leaf(POOL_X), *args)
    index = y.grad_fn.kwargs["index"]         # each window's first maximum
    # per block: the offset and mask bytes and the offsets as intp (<= the block's input)
    assert extra <= index.nbytes + 1.25 * _pool._BLOCK_BYTES + SLACK
    gx, extra = rule(y, 0)                    # zeros and one scatter
    assert extra <= SLACK


def test_max_pool1d():
    y, extra = forward(F.max_pool1d, leaf(rand((32, 32, 1024), 1)), 3, 2)
    assert extra <= y.grad_fn.kwargs["index"].nbytes + 1.25 * _pool._BLOCK_BYTES + SLACK
    gx, extra = rule(y, 0)
    assert extra <= SLACK


@pytest.mark.parametrize("args,kw", [((2,), {}), ((3, 2, 1), {}),
                                     ((3, 1, 1), dict(count_include_pad=False))])
def test_avg_pool2d(args, kw):
    y, extra = forward(F.avg_pool2d, leaf(POOL_X), *args, **kw)
    assert extra <= SLACK                     # adds into the output, divides in place
    gx, extra = rule(y, 0)                    # g / divisor for one block of planes
    assert extra <= _pool._BLOCK_BYTES + SLACK
    # the derivative as an op: avg_pool_backward, whose derivative is the pooling
    z = _pool.avg_pool_backward(pa.tensor(rand(y.shape, 3), requires_grad=True),
                                POOL_X.shape, 2, *args, **kw)
    gg, extra = rule(z, 0)
    assert extra <= SLACK


@pytest.mark.parametrize("size", [7, 32])
def test_adaptive_max_pool2d(size):
    y, extra = forward(F.adaptive_max_pool2d, leaf(POOL_X), size)
    index = y.grad_fn.kwargs["index"]
    # per block: the gathered windows (<= _BLOCK_BYTES, one buffer reused) and their
    # argmax (intp, one per output of the block: <= a quarter of the windows)
    assert extra <= index.nbytes + _pool._BLOCK_BYTES + _pool._BLOCK_BYTES // 4 + SLACK
    gx, extra = rule(y, 0)
    assert extra <= SLACK


# ---- resampling ----------------------------------------------------------------------------
RS_X = rand((16, 16, 32, 32), 1)              # 2 MiB
RS_X5 = rand((4, 8, 16, 32, 32), 2)           # 4 MiB


def intermediates(shape, out_sizes, itemsize=8):
    """Bytes of the separable map's intermediates: the last axis mapped first, then the
    others (the last map writes the result)."""
    shape, total = list(shape), 0
    nd = len(out_sizes)
    for d in reversed(range(1, nd)):
        shape[len(shape) - nd + d] = out_sizes[d]
        total += int(np.prod(shape)) * itemsize
    return total


@pytest.mark.parametrize("x,kw", [
    (RS_X, dict(scale_factor=2)), (RS_X, dict(scale_factor=2, mode="bilinear")),
    (RS_X, dict(scale_factor=2, mode="bicubic", align_corners=True)),
    (RS_X, dict(scale_factor=0.5, mode="bilinear")),
    (RS_X, dict(size=(20, 40), mode="nearest-exact")), (RS_X, dict(size=7, mode="area")),
    (RS_X5, dict(scale_factor=2, mode="trilinear")), (RS_X5, dict(size=(8, 16, 16), mode="area")),
    (RS_X5, dict(scale_factor=2))], ids=lambda a: "" if isinstance(a, np.ndarray) else str(a))
def test_interpolate(x, kw):
    x = leaf(x)
    y, extra = forward(F.interpolate, x, **kw)
    assert extra <= intermediates(x.shape, y.shape[2:]) + SLACK
    gx, extra = rule(y, 0)                    # the transposed map
    assert extra <= intermediates(y.shape, x.shape[2:]) + SLACK


def test_adaptive_avg_pool2d_and_pixel_shuffle():
    x = leaf(RS_X)
    y, extra = forward(F.adaptive_avg_pool2d, x, 7)
    assert extra <= intermediates(x.shape, (7, 7)) + SLACK
    gx, extra = rule(y, 0)
    assert extra <= intermediates(y.shape, (32, 32)) + SLACK
    for op in (F.pixel_shuffle, F.pixel_unshuffle):
        y, extra = forward(op, x, 2)          # one transposing copy each
        assert extra <= SLACK
        gx, extra = rule(y, 0)
        assert extra <= SLACK


# ---- recurrences ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_recurrence(mode, batch_first):
    T, N, H = 16, 64, 128
    G = _recurrent.GATES[mode]
    xp = leaf(0.5 * rand((N, T, G * H) if batch_first else (T, N, G * H), 1))
    h0 = leaf(rand((N, H), 2))
    c0 = leaf(rand((N, H), 3)) if mode == "LSTM" else None
    w, b = leaf(0.1 * rand((G * H, H), 4)), leaf(rand(G * H, 5))
    y, extra = forward(_recurrent.recurrence, mode, xp, h0, c0, w, b, batch_first=batch_first)
    kept = y.grad_fn.saved                    # (ans, xp, h0, c0, w_hh, b_hh, *extras)
    # the projections are not kept (a placeholder: the formula replays the steps from the
    # saved gates, `activation_of`), only the activations (and cells) the rule reads
    assert not any(isinstance(a, np.ndarray) and np.shares_memory(a, xp.numpy())
                   for a in kept), "the recurrence node keeps the projections xp"
    saved = sum(a.nbytes for a in kept[6:8] if a is not None)
    # the activations (and cells) the rule reads, and one step's GEMM result
    assert extra <= saved + N * G * H * 8 + SLACK
    grads, extra = joint(y)
    hp = T * N * H * 8                        # W_hh's GEMM operand: the previous states
    # the GRU: the n gate's part of the hidden projection's gradient (dn r), a third of
    # the projections' size (its r and z parts are the projections' gradient)
    dpre = xp.numpy().nbytes // 3 if mode == "GRU" else 0
    assert extra <= hp + dpre + SLACK


# ---- grouped-query attention ---------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa(causal):
    q, k, v = (leaf(rand((4, h, 256, 64), s)) for s, h in ((1, 8), (2, 2), (3, 2)))
    y, extra = forward(F.scaled_dot_product_attention, q, k, v, enable_gqa=True,
                       is_causal=causal)
    p = y.grad_fn.saved[5]             # the weights (after ans, q, k, v, attn_mask)
    assert extra <= p.nbytes + SLACK
    grads, extra = joint(y)
    assert extra <= p.nbytes + SLACK          # dS: one scores-sized temporary


# ---- layer_norm ----------------------------------------------------------------------------
def backward_scratch(y):
    """(gradients, scratch bytes) of y's node: its joint rule's temporaries, or the sum of
    its per-input rules' (each run as the engine runs it)."""
    if y.grad_fn.joint is not None:
        return joint(y)
    grads, total = [], 0
    for i in range(len(y.grad_fn.vjps)):
        if y.grad_fn.vjps[i] is not None:
            gi, extra = rule(y, i)
            grads.append(gi)
            total += extra
    return grads, total


@pytest.mark.parametrize("shape, dtype, affine", [((64, 64, 64), np.float32, True),
                                                  ((20, 35, 200), np.float64, True),
                                                  ((64, 64, 64), np.float64, False)])
def test_layer_norm(shape, dtype, affine):
    from parallel_autograd.ops import _common
    d = shape[-1]
    x = leaf(rand(shape, 1).astype(dtype))
    w, b = (leaf(rand(d, s).astype(dtype)) for s in (2, 3)) if affine else (None, None)
    y, extra = forward(F.layer_norm, x, (d,), w, b)
    rows = x.numpy().size // d
    stats = 2 * rows * x.numpy().itemsize     # each row's mean and 1/std, kept for the rules
    assert extra <= 2 * stats + SLACK         # and a row-sized temporary: no block, no copy
    # the three gradients in one sweep: one row block of scratch (h = g w) when weighted,
    # none otherwise (three rules took one block each for x and the weight: 607 KB for
    # the first case, over this bound)
    grads, extra = backward_scratch(y)
    assert extra <= (_common.ROW_BLOCK_BYTES if affine else 0) + stats + SLACK
    assert [gi.shape for gi in grads] == [shape] + ([(d,), (d,)] if affine else [])
