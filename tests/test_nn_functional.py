"""nn.functional: gradients by finite differences for every op and several shapes,
float32 forward/backward, op-specific semantics, bad-input errors, and the memory each
fused op and rule allocates beyond what it returns (`conftest.temporary_bytes`)."""
import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.ops._common import ROW_BLOCK_BYTES
import parallel_autograd.nn.functional as F
from conftest import temporary_bytes


def rand(shape, seed=0, low=None, high=None):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


TARGETS = np.array([2, 0, 3, 3, 1])
MASK = np.random.default_rng(9).random((2, 4, 5)) > 0.4
MASK[..., 0] = True   # every query attends somewhere

# name -> (fn of tensors, input shapes). Each input requires grad.
# max_unpool: per-plane flat indices as max pooling's return_indices gives (distinct)
UNPOOL_2D = np.array([[0, 3, 4], [13, 9, 10]]) + np.zeros((2, 2, 1, 1), int)
UNPOOL_1D = np.array([[[1, 2, 6]], [[0, 3, 5]]])

CASES = {
    "linear": (F.linear, [(3, 4), (5, 4), (5,)]),
    "linear_nobias_3d": (F.linear, [(2, 3, 4), (5, 4)]),
    "linear_1d_input": (F.linear, [(4,), (2, 4), (2,)]),
    "linear_1d_weight_3d_input": (F.linear, [(2, 3, 4), (4,), ()]),
    "linear_bias_broadcasts_output_up": (F.linear, [(4,), (2, 4), (3, 2)]),
    "bilinear": (F.bilinear, [(3, 4), (3, 2), (5, 4, 2), (5,)]),
    "conv2d": (F.conv2d, [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]),
    "conv2d_stride2_pad1": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                            [(1, 2, 6, 5), (3, 2, 3, 3), (3,)]),
    "conv2d_pairs_nobias": (lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2)),
                            [(2, 2, 5, 4), (3, 2, 2, 3)]),
    "conv2d_1x1": (lambda x, w: F.conv2d(x, w), [(2, 3, 3, 3), (2, 3, 1, 1)]),
    "conv2d_full_kernel": (F.conv2d, [(2, 2, 3, 4), (3, 2, 3, 4), (3,)]),
    # 'same' stride-1 convolutions take the flat-shift path (tests/test_nn_kernels.py)
    "conv2d_same_3x3": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
                        [(3, 2, 4, 5), (3, 2, 3, 3), (3,)]),
    "conv2d_same_rows_of_padding": (lambda x, w: F.conv2d(x, w, padding=(2, 1)),
                                    [(2, 2, 3, 4), (2, 2, 1, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(2, 3, 4, 6)]),
    "max_pool2d_overlap_pad": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
                               [(1, 2, 7, 6)]),
    "max_pool2d_rect": (lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2)), [(1, 2, 4, 7)]),
    "max_pool2d_gaps_odd": (lambda x: F.max_pool2d(x, 2, stride=3, padding=1), [(2, 2, 7, 6)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), [(2, 3, 4, 6)]),
    "avg_pool2d_overlap_pad": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
                               [(1, 2, 7, 6)]),
    "avg_pool2d_exclude_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                               [(1, 2, 7, 6)]),
    "avg_pool2d_gaps_exclude_pad": (lambda x: F.avg_pool2d(x, (2, 3), (3, 2), (1, 1),
                                                           count_include_pad=False),
                                    [(2, 2, 7, 6)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [(2, 3, 4), (4,), (4,)]),
    "layer_norm_2d_noaffine": (lambda x: F.layer_norm(x, (3, 4)), [(2, 3, 4)]),
    "layer_norm_int_shape": (lambda x, w: F.layer_norm(x, 5, w, eps=1e-3), [(3, 5), (5,)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4,), w), [(2, 3, 4), (4,)]),
    "rms_norm_eps": (lambda x: F.rms_norm(x, [3, 4], eps=1e-2), [(2, 3, 4)]),
    "rms_norm_2d_weight": (lambda x, w: F.rms_norm(x, (3, 4), w), [(2, 3, 4), (3, 4)]),
    "embedding": (lambda w: F.embedding(np.array([[1, 2, -4], [4, 1, 0]]), w), [(5, 3)]),
    # the padding row gets no gradient by design (tested below), so it is not looked up here
    "embedding_padding_idx": (lambda w: F.embedding(np.array([0, 4, 4, 1]), w, padding_idx=2),
                              [(5, 3)]),
    "embedding_bag": (lambda w, s: F.embedding_bag(np.array([1, 2, 4, 4, 0]), w,
                                                   np.array([0, 2, 2]), mode="sum",
                                                   per_sample_weights=s), [(5, 3), (5,)]),
    "embedding_bag_mean_2d": (lambda w: F.embedding_bag(np.array([[1, 2], [3, 3]]), w),
                              [(5, 3)]),
    "dropout": (lambda x: F.dropout(x, 0.4, seed=3), [(4, 5)]),
    "dropout_eval": (lambda x: F.dropout(x, 0.4, training=False), [(4, 5)]),
    "dropout1d": (lambda x: F.dropout1d(x * x, 0.5, seed=4), [(3, 4, 2)]),
    "dropout2d": (lambda x: F.dropout2d(x, 0.5, seed=5), [(2, 3, 2, 2)]),
    "dropout3d": (lambda x: F.dropout3d(x, 0.5, seed=6), [(3, 2, 2, 2)]),
    "alpha_dropout": (lambda x: F.alpha_dropout(x * x, 0.3, True, seed=7), [(4, 5)]),
    "feature_alpha_dropout": (lambda x: F.feature_alpha_dropout(x, 0.3, True, seed=8),
                              [(2, 4, 3)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, TARGETS), [(5, 4)]),
    "cross_entropy_sum": (lambda x: F.cross_entropy(x, TARGETS, reduction="sum"), [(5, 4)]),
    "cross_entropy_none": (lambda x: F.cross_entropy(x, TARGETS, reduction="none"), [(5, 4)]),
    "cross_entropy_ignore": (lambda x: F.cross_entropy(x, np.array([2, -100, 3, 3, -100])),
                             [(5, 4)]),
    "cross_entropy_smooth_weight": (
        lambda x: F.cross_entropy(x, np.array([2, 0, -1, 3, 1]), np.array([1.0, 2, 0.5, 1]),
                                  ignore_index=-1, label_smoothing=0.1), [(5, 4)]),
    "nll_loss": (lambda x: F.nll_loss(F.log_softmax(x, dim=1), TARGETS), [(5, 4)]),
    "nll_loss_weight": (lambda x: F.nll_loss(x, TARGETS, np.array([1.0, 2, 3, 4]),
                                             reduction="sum"), [(5, 4)]),
    "mse_loss": (F.mse_loss, [(3, 4), (3, 4)]),
    "mse_loss_broadcast_sum": (lambda a, b: F.mse_loss(a, b, reduction="sum"), [(3, 4), (4,)]),
    "mse_loss_none": (lambda a, b: F.mse_loss(a, b, reduction="none"), [(2, 3), (2, 3)]),
    "scaled_dot_product_attention": (F.scaled_dot_product_attention,
                                     [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
    "sdpa_causal_heads": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=True),
                          [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3)]),
    "sdpa_bool_mask_scale": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, MASK, scale=0.7), [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
    "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
                        [(2, 4, 3), (2, 5, 3), (2, 5, 2), (4, 5)]),
    "sdpa_dropout_seeded": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, dropout_p=0.3, seed=1), [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
    "relu": (F.relu, [(3, 4)]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), [(3, 4)]),
    "gelu": (F.gelu, [(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=3.0), [(3, 4)]),
    "softsign": (F.softsign, [(3, 4)]),
    "mish": (F.mish, [(3, 4)]),
    "elu": (lambda x: F.elu(x, alpha=0.7), [(3, 4)]),
    "selu": (F.selu, [(3, 4)]),
    "celu": (lambda x: F.celu(x, alpha=1.5), [(3, 4)]),
    "hardtanh": (lambda x: F.hardtanh(x, -0.8, 0.6), [(3, 4)]),
    "hardsigmoid": (lambda x: F.hardsigmoid(x * 4), [(3, 4)]),
    "hardswish": (lambda x: F.hardswish(x * 4), [(3, 4)]),
    "logsigmoid": (F.logsigmoid, [(3, 4)]),
    "prelu": (F.prelu, [(2, 3, 4), (3,)]),
    "prelu_shared": (F.prelu, [(2, 3), (1,)]),
    "glu": (lambda x: F.glu(x, dim=0), [(4, 3)]),
    "normalize": (lambda x: F.normalize(x, p=3.0, dim=1), [(3, 4)]),
    "relu6": (lambda x: F.relu6(x * 4 + 1), [(3, 4)]),
    "softmin": (lambda x: F.softmin(x, dim=0), [(3, 4)]),
    # one_hot is not differentiable (int64): a constant mask here
    "one_hot_mask": (lambda x: x * F.one_hot(pa.tensor([0, 2, 1]), 4).to(x.dtype), [(3, 4)]),
    "conv1d_groups_dilated": (lambda x, w, b: F.conv1d(x, w, b, padding=2, dilation=2, groups=2),
                              [(2, 4, 7), (6, 2, 3), (6,)]),
    "conv3d_strided": (lambda x, w: F.conv3d(x, w, stride=(1, 2, 1), padding=1),
                       [(1, 2, 3, 4, 3), (2, 2, 2, 3, 2)]),
    "conv_transpose1d": (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1,
                                                            output_padding=1),
                         [(2, 4, 4), (4, 3, 3), (3,)]),
    "conv_transpose2d_groups": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=2),
                                [(2, 4, 3, 3), (4, 1, 3, 2), (2,)]),
    "conv_transpose3d": (lambda x, w: F.conv_transpose3d(x, w, stride=2),
                         [(1, 2, 2, 2, 2), (2, 1, 2, 2, 2)]),
    "unfold": (lambda x: F.unfold(x, 2, padding=1), [(2, 2, 3, 4)]),
    "fold": (lambda x: F.fold(x, (3, 4), 2, padding=1), [(2, 8, 20)]),
    "max_pool1d_ceil": (lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True), [(2, 3, 8)]),
    "avg_pool1d_ceil": (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [(2, 3, 8)]),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 3), [(2, 3, 7)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(2, 2, 5, 4)]),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 3), [(2, 3, 7)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), [(2, 2, 5, 4)]),
    "interpolate_bilinear": (lambda x: F.interpolate(x, size=(3, 5), mode="bilinear"),
                             [(2, 2, 4, 3)]),
    "upsample_nearest": (lambda x: F.upsample(x, scale_factor=2), [(2, 2, 2, 3)]),
    "upsample_nearest_alias": (lambda x: F.upsample_nearest(x, scale_factor=2),
                               [(2, 2, 2, 3)]),
    "upsample_bilinear": (lambda x: F.upsample_bilinear(x, size=(3, 5)), [(2, 2, 4, 3)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), [(2, 8, 2, 3)]),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), [(2, 2, 4, 6)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, 3, 2, 1), [(1, 2, 4, 5, 3)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 3, 2, 1, True, False), [(1, 2, 4, 5, 3)]),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), [(2, 3, 5, 4)]),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (2, 2, 3)), [(1, 2, 3, 4, 5)]),
    "max_unpool2d": (lambda x: F.max_unpool2d(x, UNPOOL_2D, 2), [(2, 2, 2, 3)]),
    "max_unpool1d_size": (lambda x: F.max_unpool1d(x, UNPOOL_1D, 2, output_size=(7,)),
                          [(2, 1, 3)]),
    "lp_pool1d": (lambda x: F.lp_pool1d(x * x + 0.5, 1.5, 3, 2), [(2, 3, 8)]),
    "lp_pool2d_ceil": (lambda x: F.lp_pool2d(x, 2, 2, 1, True), [(1, 2, 4, 5)]),
    "lp_pool3d": (lambda x: F.lp_pool3d(x, 2, (2, 1, 2)), [(1, 2, 3, 2, 4)]),
    "pad_reflect": (lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"), [(2, 2, 4, 5)]),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 0, 1, 2, 0), mode="replicate"),
                      [(1, 2, 3, 3, 4)]),
    "pad_circular": (lambda x: F.pad(x, (3, 2), mode="circular"), [(2, 3, 4)]),
    "pad_constant": (lambda x: F.pad(x, (1, -1, 2, 0), value=0.5), [(2, 3, 4)]),
    "l1_loss": (lambda x, y: F.l1_loss(x, y, reduction="none"), [(3, 4), (3, 4)]),
    "smooth_l1_loss": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), [(3, 4), (3, 4)]),
    "huber_loss": (lambda x, y: F.huber_loss(x, y, "sum", 0.7), [(3, 4), (4,)]),
    "binary_cross_entropy": (lambda x, y: F.binary_cross_entropy(F.sigmoid(x), F.sigmoid(y)),
                             [(3, 4), (3, 4)]),
    "binary_cross_entropy_with_logits": (
        lambda x, y: F.binary_cross_entropy_with_logits(x, F.sigmoid(y),
                                                        pos_weight=np.array([1., 2, .5, 1])),
        [(3, 4), (3, 4)]),
    "kl_div": (lambda x, y: F.kl_div(F.log_softmax(x, 1), F.softmax(y, 1), reduction="batchmean"),
               [(3, 4), (3, 4)]),
    "cosine_embedding_loss": (lambda a, b: F.cosine_embedding_loss(a, b, np.array([1, -1, 1])),
                              [(3, 4), (3, 4)]),
    "margin_ranking_loss": (lambda a, b, t: F.margin_ranking_loss(a, b, t, 0.1,
                                                                  reduction="none"),
                            [(4,), (4,), (4,)]),
    "triplet_margin_loss": (lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True),
                            [(3, 4), (3, 4), (3, 4)]),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   [(4, 3, 2), (3,), (3,)]),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      [(2, 3, 4), (3,), (3,)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    "local_response_norm": (lambda x: F.local_response_norm(x, 3), [(2, 4, 3)]),
    "silu": (F.silu, [(3, 4)]),
    "sigmoid": (F.sigmoid, [(3, 4)]),
    "tanh": (F.tanh, [(3, 4)]),
    "softmax": (lambda x: F.softmax(x, dim=0), [(3, 4)]),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), [(2, 3, 4)]),
}


def inputs_for(shapes, seed=0):
    return [rand(s, seed + i) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_gradcheck(name):
    fn, shapes = CASES[name]
    assert pa.gradcheck(fn, [leaf(a) for a in inputs_for(shapes)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_gradgradcheck(name):
    # second order through each op's twin (or, for compositions, their ops' twins)
    fn, shapes = CASES[name]
    assert pa.gradgradcheck(fn, [leaf(a) for a in inputs_for(shapes)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_float32(name):
    fn, shapes = CASES[name]
    arrays = inputs_for(shapes, 10)
    t32 = [pa.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    t64 = [leaf(a) for a in arrays]
    y32, y64 = fn(*t32), fn(*t64)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), y64.numpy(), rtol=1e-4, atol=1e-5)
    w = rand(y64.shape, 11)
    g32 = pa.grad(y32, t32, grad_outputs=w.astype(np.float32))
    g64 = pa.grad(y64, t64, grad_outputs=w)
    for a, b in zip(g32, g64):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_every_functional_op_is_gradchecked():
    tested = {n for n in F.__all__ if any(k == n or k.startswith(n + "_") for k in CASES)}
    assert set(F.__all__) - tested == set()
    assert all(callable(getattr(F, n)) for n in F.__all__)


# ---- values against direct numpy computations ----------------------------------------
def _conv_reference(x, w, b, stride, padding):
    sh, sw = stride
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    n, _, hp, wp = xp.shape
    o, _, kh, kw = w.shape
    ho, wo = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    out = np.zeros((n, o, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0)), (3, 2)])
def test_conv2d_matches_direct_loop(stride, padding):
    x, w, b = rand((2, 3, 7, 6), 1), rand((4, 3, 3, 2), 2), rand(4, 3)
    out = F.conv2d(pa.tensor(x), pa.tensor(w), pa.tensor(b), stride=stride, padding=padding)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    np.testing.assert_allclose(out.numpy(), _conv_reference(x, w, b, pair(stride), pair(padding)),
                               rtol=1e-12, atol=1e-12)
    assert out.numpy().flags.c_contiguous


def test_conv2d_is_one_primitive_node_and_frozen_weight_skips_columns():
    x, w = leaf(rand((1, 2, 5, 5), 1)), pa.tensor(rand((3, 2, 3, 3), 2))
    out = F.conv2d(x, w)
    assert out.grad_fn.name == "conv2d"
    # (ans, x, w, b, columns, geometry): no column buffer kept, the weight is frozen
    assert out.grad_fn.saved[4] is None
    out.sum().backward()
    assert x.grad.shape == x.shape and w.grad is None


def test_pools_match_direct_computation():
    x = rand((2, 3, 5, 6), 4)
    mp = F.max_pool2d(pa.tensor(x), 2).numpy()
    ap = F.avg_pool2d(pa.tensor(x), 2).numpy()
    blocks = x[:, :, :4, :6].reshape(2, 3, 2, 2, 3, 2)
    np.testing.assert_array_equal(mp, blocks.max(axis=(3, 5)))
    np.testing.assert_allclose(ap, blocks.mean(axis=(3, 5)), rtol=1e-14)


def test_max_pool_gradient_goes_to_first_maximum_only():
    x = leaf(np.array([[[[1.0, 5.0], [5.0, 2.0]]]]))
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad, [[[[0, 1], [0, 0]]]])


def test_max_pool_padding_is_never_selected():
    x = leaf(-np.ones((1, 1, 2, 2)) * 7)
    out = F.max_pool2d(x, 3, stride=1, padding=1)
    np.testing.assert_array_equal(out.numpy(), -7 * np.ones((1, 1, 2, 2)))
    out.sum().backward()
    assert x.grad.sum() == 4


def test_avg_pool_count_include_pad():
    x = pa.tensor(np.ones((1, 1, 2, 2)))
    inc = F.avg_pool2d(x, 3, stride=1, padding=1).numpy()
    exc = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False).numpy()
    np.testing.assert_allclose(inc, 4 / 9 * np.ones((1, 1, 2, 2)))
    np.testing.assert_allclose(exc, np.ones((1, 1, 2, 2)))


def test_layer_norm_and_rms_norm_values():
    x = rand((3, 6), 5)
    y = F.layer_norm(pa.tensor(x), (6,)).numpy()
    np.testing.assert_allclose(y, (x - x.mean(1, keepdims=True))
                               / np.sqrt(x.var(1, keepdims=True) + 1e-5), rtol=1e-12)
    r = F.rms_norm(pa.tensor(x), 6).numpy()
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(r, x / np.sqrt((x * x).mean(1, keepdims=True) + eps), rtol=1e-12)
    r32 = F.rms_norm(pa.tensor(x.astype(np.float32)), 6)
    assert r32.dtype == np.float32


def test_embedding_repeated_indices_and_padding_idx():
    w = leaf(rand((4, 2), 6))
    out = F.embedding(pa.tensor(np.array([[3, 1], [3, 3]])), w, padding_idx=1)
    np.testing.assert_array_equal(out.numpy(), w.numpy()[[[3, 1], [3, 3]]])
    out.sum().backward()
    np.testing.assert_array_equal(w.grad, [[0, 0], [0, 0], [0, 0], [3, 3]])


def test_dropout_is_reproducible_and_scaled():
    x = pa.tensor(np.ones((200, 50)))
    a, b = F.dropout(x, 0.3, seed=7), F.dropout(x, 0.3, seed=7)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), F.dropout(x, 0.3, seed=8).numpy())
    assert set(np.unique(a.numpy())) == {0.0, 1 / 0.7}
    assert abs((a.numpy() == 0).mean() - 0.3) < 0.02
    r1, r2 = np.random.default_rng(4), np.random.default_rng(4)
    np.testing.assert_array_equal(F.dropout(x, 0.5, rng=r1).numpy(),
                                  F.dropout(x, 0.5, rng=r2).numpy())
    assert F.dropout(x, 0.5, training=False) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), 0)


def test_dropout_gradient_uses_the_forward_mask():
    x = leaf(rand((6, 7), 1))
    y = F.dropout(x, 0.5, seed=2)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, (y.numpy() != 0) * 2.0)


def test_cross_entropy_values():
    logits, t = rand((5, 4), 3), TARGETS
    lsm = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    per = -lsm[np.arange(5), t]
    ce = F.cross_entropy(pa.tensor(logits), pa.tensor(t))
    np.testing.assert_allclose(ce.numpy(), per.mean(), rtol=1e-13)
    np.testing.assert_allclose(F.cross_entropy(pa.tensor(logits), t, reduction="none").numpy(), per)
    ig = np.array([2, -100, 3, 3, -100])
    np.testing.assert_allclose(F.cross_entropy(pa.tensor(logits), ig).numpy(),
                               -lsm[[0, 2, 3], [2, 3, 3]].mean(), rtol=1e-13)


def test_sdpa_matches_explicit_formula():
    q, k, v = rand((2, 4, 3), 1), rand((2, 5, 3), 2), rand((2, 5, 2), 3)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(3)
    s = np.where(MASK, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = F.scaled_dot_product_attention(pa.tensor(q), pa.tensor(k), pa.tensor(v),
                                         attn_mask=pa.tensor(MASK))
    np.testing.assert_allclose(out.numpy(), p @ v, rtol=1e-12)


# ---- bad input -----------------------------------------------------------------------
@pytest.mark.parametrize("call,exc,match", [
    (lambda: F.conv2d(pa.ones(1, 3, 5, 5), pa.ones(2, 4, 3, 3)), ValueError,
     "conv2d: input has 3 channels but weight"),
    (lambda: F.conv2d(pa.ones(5, 5), pa.ones(2, 3, 3, 3)), ValueError, "conv2d: expected 4-D"),
    (lambda: F.conv2d(pa.ones(1, 1, 2, 2), pa.ones(1, 1, 3, 3)), ValueError,
     "conv2d: kernel size 3 is larger than the padded input size 2"),
    (lambda: F.conv2d(pa.ones(1, 1, 4, 4), pa.ones(2, 1, 3, 3), pa.ones(3)), ValueError,
     "conv2d: bias shape"),
    (lambda: F.conv2d(pa.ones(1, 1, 4, 4), pa.ones(2, 1, 3, 3), stride=0), ValueError,
     "conv2d: kernel size and stride must be positive"),
    (lambda: F.conv2d(pa.ones(1, 1, 4, 4), pa.ones(2, 1, 3, 3), padding=(1, 2, 3)), ValueError,
     "conv2d: padding must be an int or a pair"),
    (lambda: F.max_pool2d(pa.ones(1, 1, 4, 4), 2, padding=2), ValueError,
     "max_pool2d: padding .* should be at most half"),
    (lambda: F.avg_pool2d(pa.ones(4, 4), 2), ValueError, "avg_pool2d: expected a 4-D input"),
    (lambda: F.layer_norm(pa.ones(2, 3), (4,)), RuntimeError,
     r"layer_norm: normalized_shape \(4,\) does not match"),
    (lambda: F.layer_norm(pa.ones(2, 3), 3, pa.ones(4)), RuntimeError,
     "layer_norm: weight shape"),
    (lambda: F.rms_norm(pa.ones(2, 3), (2, 3, 1)), ValueError, "rms_norm: normalized_shape"),
    (lambda: F.embedding(pa.tensor([0.0, 1.0]), pa.ones(3, 2)), TypeError,
     "embedding: indices must be integers"),
    (lambda: F.embedding(np.array([0, 3]), pa.ones(3, 2)), IndexError,
     "embedding: index out of range"),
    (lambda: F.dropout(pa.ones(3), 1.5), ValueError,
     "dropout probability has to be between 0 and 1, but got 1.5"),
    (lambda: F.dropout1d(pa.ones(3), 0.5), RuntimeError, "dropout1d: Expected 2D or 3D input"),
    (lambda: F.cross_entropy(pa.ones(4), np.array([1])), ValueError,
     "cross_entropy: expected 2-D input"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0.0, 1.0])), TypeError,
     "cross_entropy: target must hold class indices"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0, 3])), IndexError,
     "cross_entropy: target 3 is out of bounds for 3 classes"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0, 1, 2])), ValueError,
     "cross_entropy: target shape"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0, 1]), reduction="avg"), ValueError,
     "cross_entropy: reduction must be"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0, 1]), "sum"), TypeError,
     "cross_entropy: the third positional argument is the class weight"),
    (lambda: F.cross_entropy(pa.ones(2, 3), np.array([0, 1]), pa.ones(2)), ValueError,
     "cross_entropy: weight shape"),
    (lambda: F.mse_loss(pa.ones(2), pa.ones(2), reduction="max"), ValueError,
     "mse_loss: reduction must be"),
    (lambda: F.mse_loss(pa.ones(2), pa.ones(3)), ValueError,
     r"mse_loss: shape mismatch: .* cannot be broadcast"),
    (lambda: F.linear(pa.ones(2, 3), pa.ones(4, 5)), RuntimeError,
     r"linear: input of shape \(2, 3\) does not match weight of shape \(4, 5\)"),
    (lambda: F.linear(pa.ones(2, 3), pa.ones(4, 3, dtype=np.float32)), RuntimeError,
     "linear: expected the input and the weight to have the same dtype"),
    (lambda: F.scaled_dot_product_attention(pa.ones(2, 3), pa.ones(2, 3), pa.ones(2, 3),
                                            np.ones((2, 2), bool), is_causal=True),
     ValueError, "either attn_mask or is_causal"),
    (lambda: F.scaled_dot_product_attention(pa.ones(2, 3), pa.ones(2, 4), pa.ones(2, 3)),
     ValueError, r"scaled_dot_product_attention: expected query .* \(2, 3\), \(2, 4\)"),
    (lambda: F.scaled_dot_product_attention(pa.ones(2, 3), pa.ones(2, 3), pa.ones(5, 3)),
     ValueError, "scaled_dot_product_attention: expected query"),
])
def test_bad_input_raises_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_dropout_draws_are_those_of_one_uniform_array():
    x = pa.tensor(np.ones((300, 211)))          # more than one block of draws
    kept = F.dropout(x, 0.3, seed=5).numpy() != 0
    np.testing.assert_array_equal(kept, np.random.default_rng(5).random((300, 211)) >= 0.3)


def test_sdpa_key_without_grad_and_float_mask_with_grad():
    q, k, v, m = (rand(s, i) for i, s in enumerate([(2, 4, 3), (2, 5, 3), (2, 5, 2), (4, 5)]))
    m[1] = -np.inf                               # a query that may attend nothing
    tq, tv, tm = leaf(q), leaf(v), leaf(m)
    out = F.scaled_dot_product_attention(tq, pa.tensor(k), tv, tm)
    assert not np.any(out.numpy()[:, 1])
    gq, gv, gm = (g.numpy() for g in pa.grad(out.sum(), [tq, tv, tm]))
    assert np.all(np.isfinite(gm)) and not np.any(gm[1]) and not np.any(gq[:, 1])
    assert pa.gradcheck(lambda q, v, m: F.scaled_dot_product_attention(q, pa.tensor(k), v, m),
                        [leaf(q), leaf(v), leaf(np.where(np.isinf(m), -30.0, m))])


# ---- memory: what each fused op and rule allocates beyond what it returns ----------------
# numpy's iterator buffers (8192 elements per buffered operand), Python objects, small
# per-row vectors
SLACK = 256 * 1024
BLOCK = ROW_BLOCK_BYTES                         # the row-block temporaries' size


def _rules(y):
    """Call each rule of y's node under temporary_bytes: [(gradient, extra bytes)]."""
    node, g = y.grad_fn, rand(y.shape, 11)
    if node.joint is not None:
        return [temporary_bytes(node.joint, g, *node.saved, **(node.kwargs or {}))]
    return [temporary_bytes(v, g, *node.saved, **(node.kwargs or {}))
            for v in node.vjps if v is not None]


def test_linear_memory():
    x, w, b = leaf(rand((8, 64, 128), 1)), leaf(rand((96, 128), 2)), leaf(rand(96, 3))
    y, extra = temporary_bytes(F.linear, x, w, b)
    assert extra <= SLACK                        # one GEMM into the output, bias in place
    for _, extra in _rules(y):
        assert extra <= SLACK                    # one GEMM (or a reduction) each


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_memory(op, affine):
    x = leaf(rand((64, 32, 256), 1))            # 4 MiB: 16 row blocks
    params = [leaf(rand(256, 2)), leaf(rand(256, 3))][:(2 if op == "layer_norm" else 1)]
    y, extra = temporary_bytes(getattr(F, op), x, 256, *(params if affine else []))
    assert extra <= 2 * 8 * 64 * 32 + SLACK      # per-row mean and 1/std (1/rms) kept
    for _, extra in _rules(y):
        assert extra <= BLOCK + SLACK            # g * weight or x-hat in one row block


@pytest.mark.parametrize("kw", [{}, dict(weight=np.linspace(0.5, 2, 1000), label_smoothing=0.1,
                                         ignore_index=3, reduction="sum")])
def test_cross_entropy_and_nll_memory(kw):
    x, t = leaf(rand((512, 1000), 1)), np.random.default_rng(2).integers(0, 1000, 512)
    y, extra = temporary_bytes(F.cross_entropy, x, t, **kw)
    assert extra <= BLOCK + SLACK                # exp(x - max) one row block at a time
    ((gx, extra),) = _rules(y)
    assert extra <= BLOCK + SLACK                # the smoothing term of weighted classes
    kw.pop("label_smoothing", None)
    y, extra = temporary_bytes(F.nll_loss, x, t, **kw)
    assert extra <= SLACK
    ((gx, extra),) = _rules(y)
    assert extra <= SLACK                        # zeros and one element a row


def test_embedding_and_dropout_memory():
    idx = np.random.default_rng(1).integers(-500, 500, (64, 128))
    w = leaf(rand((500, 64), 2))
    y, extra = temporary_bytes(F.embedding, idx, w)
    assert extra <= 3 * idx.nbytes + SLACK       # the non-negative indices kept
    ((gw, extra),) = _rules(y)
    assert extra <= BLOCK + SLACK                # flat indices one row block at a time
    x = leaf(rand((512, 512), 3))
    y, extra = temporary_bytes(F.dropout, x, 0.3, seed=1)
    assert extra <= x.numpy().size + 8 * 32768 + SLACK   # a bool mask kept; draws in blocks
    ((gx, extra),) = _rules(y)
    assert extra <= SLACK


@pytest.mark.parametrize("kw", [dict(is_causal=True), dict(dropout_p=0.2, seed=1)])
def test_sdpa_memory(kw):
    q, k, v = (leaf(rand((4, 2, 128, 32), i)) for i in range(3))
    y, extra = temporary_bytes(F.scaled_dot_product_attention, q, k, v, **kw)
    p = y.grad_fn.saved[5]                    # (ans, q, k, v, attn_mask, weights)
    assert p.shape == (4, 2, 128, 128)
    # the attention weights (kept), the causal mask and its negation, or the dropout
    # mask (kept, 1 byte an element) and the weights after dropout
    assert extra <= p.nbytes + max(2 * 128 * 128, p.size + p.nbytes) + SLACK
    ((grads, extra),) = _rules(y)
    assert extra <= p.nbytes * (2 if "dropout_p" in kw else 1) + SLACK   # dP (and P')


def test_dropout_without_seed_or_rng_follows_manual_seed():
    x = pa.tensor(np.ones((64, 64)))
    masks = []
    for _ in range(2):
        pa.manual_seed(3)
        a = F.dropout(x, 0.5).numpy()
        s = F.scaled_dot_product_attention(x[None], x[None], x[None], dropout_p=0.5).numpy()
        masks.append((a, s))
    assert np.array_equal(masks[0][0], masks[1][0]) and np.array_equal(masks[0][1], masks[1][1])
    pa.manual_seed(4)
    assert not np.array_equal(F.dropout(x, 0.5).numpy(), masks[0][0])
