"""The kernels of nn.functional, path by path: convolution, pooling and the row-blocked
fused rules (norms, losses, embedding).

conv2d has a flat-shift path ('same' stride-1 convolutions: im2col and col2im as shifts
of the flattened image, the input gradient one GEMM per chunk of samples), a strided
path (everything else, input gradient through an NHWC buffer), and a per-sample and a
per-chunk weight gradient (O*C*kh*kw < 1024 or not); the pools work on blocks of
planes and handle overlapping windows, gaps (stride > kernel), padding and odd sizes.
Each path is checked against PyTorch (values and all gradients), by finite
differences, for PyTorch's choices at ties, NaN and -inf, for determinism, and for the
memory it allocates beyond what it returns (`conftest.temporary_bytes`).
"""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from conftest import assert_bitwise, temporary_bytes
from parallel_autograd.nn import _conv, _pool
from parallel_autograd.ops import _common as common

TOL = 1e-10


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


def torch_or_skip():
    return pytest.importorskip("torch")


# (x shape, weight shape, stride, padding): which path each takes is in its name
CONVS = {
    "flat_3x3": ((2, 3, 6, 5), (4, 3, 3, 3), 1, 1),
    "flat_5x5_chunks": ((5, 2, 7, 6), (3, 2, 5, 5), 1, 2),
    "flat_rect_no_row_padding": ((2, 2, 6, 7), (3, 2, 3, 5), 1, (0, 2)),
    "flat_rows_of_padding_only": ((2, 2, 3, 5), (2, 2, 1, 3), 1, (2, 1)),
    "flat_1x1": ((3, 4, 4, 3), (2, 4, 1, 1), 1, 0),
    "flat_wide_per_sample_w": ((2, 2, 16, 17), (3, 2, 3, 3), 1, 1),
    "flat_chunked_w": ((3, 8, 6, 5), (16, 8, 3, 3), 1, 1),
    "strided_s2_p1": ((2, 3, 7, 6), (4, 3, 3, 3), 2, 1),
    "strided_unpadded": ((2, 3, 6, 6), (2, 3, 3, 3), 1, 0),
    "strided_rect_stride": ((2, 2, 7, 8), (3, 2, 3, 2), (2, 1), (1, 0)),
    "strided_gaps": ((1, 2, 9, 9), (2, 2, 2, 2), 3, 1),
    "strided_wide_per_sample_w": ((1, 2, 34, 36), (2, 2, 3, 3), (1, 2), 1),
    "strided_chunked_w": ((2, 8, 7, 7), (16, 8, 3, 3), 2, 1),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv2d_paths_match_torch(name):
    torch = torch_or_skip()
    xs, ws, stride, padding = CONVS[name]
    arrays = [rand(xs, 1), rand(ws, 2), rand(ws[0], 3)]
    tp = [leaf(a) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    yp = F.conv2d(*tp, stride=stride, padding=padding)
    yt = torch.nn.functional.conv2d(*tt, stride=stride, padding=padding)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=TOL, atol=TOL)
    w = rand(yp.shape, 4)
    for a, b in zip(pa.grad(yp, tp, grad_outputs=w),
                    torch.autograd.grad(yt, tt, torch.tensor(w))):
        np.testing.assert_allclose(a, b.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", ["flat_3x3", "flat_rows_of_padding_only", "strided_s2_p1",
                                  "strided_gaps", "flat_rect_no_row_padding"])
def test_conv2d_paths_gradcheck(name):
    xs, ws, stride, padding = CONVS[name]
    xs = (min(xs[0], 2),) + xs[1:]
    assert pa.gradcheck(lambda x, w, b: F.conv2d(x, w, b, stride, padding),
                        [leaf(rand(xs, 1)), leaf(rand(ws, 2)), leaf(rand(ws[0], 3))])


@pytest.mark.parametrize("name", ["flat_chunked_w", "strided_chunked_w", "flat_5x5_chunks"])
def test_conv2d_is_deterministic_byte_for_byte_whatever_the_blas_threads(name):
    # the parallel engine lowers BLAS threads: the same bytes either way
    from threadpoolctl import threadpool_limits
    xs, ws, stride, padding = CONVS[name]
    x, w = rand((8,) + xs[1:], 1), rand(ws, 2)
    runs = []
    for threads in (1, 2, 1, 2):
        with threadpool_limits(threads, user_api="blas"):
            tx, tw = leaf(x), leaf(w)
            y = F.conv2d(tx, tw, stride=stride, padding=padding)
            runs.append([y.numpy()] + list(pa.grad((y * y).sum(), [tx, tw])))
    for run in runs[1:]:
        assert_bitwise(runs[0], run)


# (x shape, kernel, stride, padding): overlap, gaps, padding, odd sizes, rectangles
POOLS = {
    "k2_even": ((2, 3, 6, 8), 2, None, 0),
    "k2_odd_sizes": ((2, 2, 5, 7), 2, None, 0),
    "k3_s2_p1_overlap": ((2, 2, 7, 8), 3, 2, 1),
    "k3_s1_p1_overlap": ((1, 2, 5, 6), 3, 1, 1),
    "k3_s3_p1_odd": ((2, 2, 8, 7), 3, 3, 1),
    "k2_s3_gaps": ((1, 2, 8, 7), 2, 3, 0),
    "rect_k32_s12_p10": ((1, 2, 5, 6), (3, 2), (1, 2), (1, 0)),
    "rect_k23_s21_p01": ((2, 1, 6, 5), (2, 3), (2, 1), (0, 1)),
}


def _pool_pair(kind, name, count_include_pad=True):
    torch = torch_or_skip()  # skips cleanly without torch (CI has none)
    xs, k, s, p = POOLS[name]
    if kind == "max":
        return (lambda x: F.max_pool2d(x, k, s, p),
                lambda x: torch.nn.functional.max_pool2d(x, k, s, p))
    return (lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=count_include_pad),
            lambda x: torch.nn.functional.avg_pool2d(x, k, s, p,
                                                     count_include_pad=count_include_pad))


def _check_against_torch(fp, ft, x, exact_grad=False):
    torch = torch_or_skip()
    tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
    yp, yt = fp(tp), ft(tt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=TOL, atol=TOL)
    w = rand(yp.shape, 7)
    (gp,), (gt,) = pa.grad(yp, [tp], grad_outputs=w), torch.autograd.grad(yt, [tt],
                                                                          torch.tensor(w))
    if exact_grad:   # where each gradient element comes from matters, not only values
        np.testing.assert_array_equal(gp != 0, gt.numpy() != 0)
    np.testing.assert_allclose(gp, gt.numpy(), rtol=TOL, atol=TOL)
    return gp


@pytest.mark.parametrize("blocks", ["one", "many"])
@pytest.mark.parametrize("name", sorted(POOLS))
@pytest.mark.parametrize("kind", ["max", "avg", "avg_exclude_pad"])
def test_pool_paths_match_torch(kind, name, blocks, monkeypatch):
    torch_or_skip()
    if blocks == "many":   # several plane blocks (and a short last one) per call
        monkeypatch.setattr(_pool, "_BLOCK_BYTES", 2 * 8 * np.prod(POOLS[name][0][2:]))
    fp, ft = _pool_pair(kind[:3], name, count_include_pad=kind == "avg")
    _check_against_torch(fp, ft, rand(POOLS[name][0], 5), exact_grad=kind == "max")


@pytest.mark.parametrize("name", ["k2_odd_sizes", "k3_s2_p1_overlap", "k2_s3_gaps",
                                  "rect_k32_s12_p10"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_paths_gradcheck(kind, name):
    xs, k, s, p = POOLS[name]
    if kind == "max":
        fn = lambda x: F.max_pool2d(x, k, s, p)  # noqa: E731
    else:
        fn = lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=False)  # noqa: E731
    assert pa.gradcheck(fn, [leaf(rand(xs, 6))])


@pytest.mark.parametrize("name", sorted(POOLS))
def test_max_pool_ties_go_to_the_first_maximum_like_torch(name):
    x = np.round(rand(POOLS[name][0], 8))            # few distinct values: many ties
    x[0, 0] = 1.0                                    # a whole plane of ties
    _check_against_torch(*_pool_pair("max", name), x, exact_grad=True)


def test_max_pool_signed_zero_ties_keep_the_first():
    x = np.array([[[[-0.0, 0.0, 0.0, -0.0]]]])
    out = F.max_pool2d(leaf(x), (1, 2)).numpy()
    assert np.signbit(out).tolist() == [[[[True, False]]]]


@pytest.mark.parametrize("name", ["k2_even", "k3_s2_p1_overlap", "rect_k32_s12_p10"])
def test_max_pool_nan_and_all_minus_inf_windows_like_torch(name):
    x = rand(POOLS[name][0], 9)
    x[0, 0, :2, :2] = -np.inf                        # windows of -inf beside the padding
    x[0, 0, 0, 0] = x[0, 1, 1, 1] = x[0, 1, 1, 0] = np.nan   # one and two NaNs a window
    x[-1, -1] = -np.inf                              # a whole plane of -inf
    torch = torch_or_skip()
    fp, ft = _pool_pair("max", name)
    tp, tt = leaf(x), torch.tensor(x, requires_grad=True)
    yp, yt = fp(tp), ft(tt)
    np.testing.assert_array_equal(yp.numpy(), yt.detach().numpy())   # NaN where torch has NaN
    yp.sum().backward()
    yt.sum().backward()
    np.testing.assert_array_equal(tp.grad, tt.grad.numpy())


def test_max_pool_int_input_with_padding():
    x = np.array([[[[np.iinfo(np.int64).min, 3], [2, 1]]]], dtype=np.int64)
    out = F.max_pool2d(pa.tensor(x), 2, 1, 1).numpy()
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out[0, 0], [[x[0, 0, 0, 0], 3, 3], [2, 3, 3], [2, 2, 1]])


# ---- row-blocked fused rules (norms, losses, embedding) against PyTorch ----------------
# name -> (fn(functional module, const, *tensors), input shapes); `const` makes the
# library's constant from a numpy array
ROW_OPS = {
    "layer_norm": (lambda F_, c, x, w, b: F_.layer_norm(x, (3, 8), w, b),
                   [(7, 3, 8), (3, 8), (3, 8)]),
    "rms_norm": (lambda F_, c, x, w: F_.rms_norm(x, (8,), w), [(5, 3, 8), (8,)]),
    "cross_entropy_weighted_smoothed": (
        lambda F_, c, x: F_.cross_entropy(x, c(np.array([2, 0, 5, 3, 1, 5, 4, 0, 2])),
                                          c(np.linspace(0.5, 2, 6)), ignore_index=5,
                                          label_smoothing=0.15), [(9, 6)]),
    "embedding_repeats": (lambda F_, c, w: F_.embedding(c(np.array([[1, 3, 1, 0],
                                                                    [3, 3, 2, 1]])), w),
                          [(4, 8)]),
}


@pytest.mark.parametrize("blocks", ["one", "many"])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_row_blocked_rules_match_torch(name, blocks, monkeypatch):
    torch = torch_or_skip()
    if blocks == "many":                 # two rows a block: short last blocks included
        monkeypatch.setattr(common, "ROW_BLOCK_BYTES", 2 * 8 * 8)
    fn, shapes = ROW_OPS[name]
    arrays = [rand(s, i + 1) for i, s in enumerate(shapes)]
    tp = [leaf(a) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    yp = fn(F, lambda a: a, *tp)
    yt = fn(torch.nn.functional, torch.tensor, *tt)
    np.testing.assert_allclose(yp.numpy(), yt.detach().numpy(), rtol=TOL, atol=TOL)
    w = rand(yp.shape, 9)
    for a, b in zip(pa.grad(yp, tp, grad_outputs=w),
                    torch.autograd.grad(yt, tt, torch.tensor(w))):
        np.testing.assert_allclose(a, b.numpy(), rtol=TOL, atol=TOL)


# ---- memory: what each op and rule allocates beyond what it returns -------------------
MiB = 1 << 20
# numpy's iterator buffers (8192 elements per buffered operand: 132 KiB for a strided
# in-place add, whatever the size), Python objects, small index arrays
SLACK = 256 * 1024


def _rule(y, i):
    """(rule, args, kwargs) of input i of y's node, to call under temporary_bytes."""
    node = y.grad_fn
    return node.vjps[i], (rand(y.shape, 11),) + tuple(node.saved), node.kwargs


def test_conv2d_memory_flat_path():
    x, w, b = leaf(rand((16, 8, 16, 16), 1)), leaf(rand((16, 8, 3, 3), 2)), leaf(rand(16, 3))
    y, extra = temporary_bytes(F.conv2d, x, w, b, padding=1)
    cols = y.grad_fn.saved[4]                 # (ans, x, w, b, columns, geometry)
    assert cols.nbytes == 9 * x.numpy().nbytes
    # the column buffer, kept for the weight, and one chunk's GEMM result (O, n*Ho*Wo)
    # before its transposed copy into the output
    assert extra <= cols.nbytes + y.numpy().nbytes + SLACK
    rule, args, kw = _rule(y, 0)
    gx, extra = temporary_bytes(rule, *args, **kw)
    assert gx.flags.c_contiguous
    # one chunk of columns (<= the input's size) and that chunk of g, transposed
    assert extra <= x.numpy().nbytes + y.numpy().nbytes + SLACK
    rule, args, kw = _rule(y, 1)              # one GEMM a chunk: g's chunk, <= 1 MiB
    gw, extra = temporary_bytes(rule, *args, **kw)
    assert extra <= min(y.numpy().nbytes, 1 << 20) + SLACK
    rule, args, kw = _rule(y, 2)
    gb, extra = temporary_bytes(rule, *args, **kw)
    assert extra <= SLACK


def test_conv2d_frozen_weight_builds_columns_chunk_by_chunk():
    x, w = pa.tensor(rand((64, 16, 16, 16), 1)), pa.tensor(rand((32, 16, 3, 3), 2))
    y, extra = temporary_bytes(F.conv2d, x, w, padding=1)
    assert y.grad_fn is None
    full_cols = 9 * x.numpy().nbytes             # 18 MiB: never allocated at once
    chunk = _conv._COLS_BYTES                     # 4 MiB of columns, and its GEMM result
    assert extra <= chunk + chunk * 32 // (16 * 9) + SLACK < full_cols


def test_conv2d_memory_strided_path_and_frozen_weight():
    x, w = leaf(rand((8, 16, 16, 16), 1)), pa.tensor(rand((16, 16, 3, 3), 2))
    y, extra = temporary_bytes(F.conv2d, x, w, stride=2, padding=1)
    assert y.grad_fn.saved[4] is None         # frozen weight: no columns kept...
    cols_bytes = 16 * 9 * 8 * 8 * 8 * 8       # ...but they were built for the GEMM
    assert extra <= cols_bytes + SLACK
    rule, args, kw = _rule(y, 0)
    gx, extra = temporary_bytes(rule, *args, **kw)
    # g in NHWC and the (N*Ho*Wo, K*C) product of one GEMM over all kernel offsets (the
    # columns' size); the NHWC buffer is what is returned (seen as NCHW)
    assert extra <= y.numpy().nbytes + 8 * 8 * 8 * 9 * 16 * 8 + SLACK


@pytest.mark.parametrize("o,path", [(8, "per-sample"), (64, "chunked")])
def test_conv2d_weight_memory(o, path):
    x, w = pa.tensor(rand((32, 4, 16, 16), 1)), leaf(rand((o, 4, 3, 3), 2))
    y = F.conv2d(x, w, padding=1)             # O*C*kh*kw = 288 or 2304
    rule, args, kw = _rule(y, 1)
    gw, extra = temporary_bytes(rule, *args, **kw)
    if path == "per-sample":                  # a buffer <= one sample of g
        assert extra <= y.numpy()[0].nbytes + SLACK
    else:                                     # g's chunk, transposed: <= 1 MiB
        assert y.numpy().nbytes > 1 << 20 and extra <= (1 << 20) + SLACK


@pytest.mark.parametrize("name,shape,k,s,p", [
    ("non_overlapping", (8, 16, 32, 32), 2, 2, 0),
    ("overlapping_padded", (8, 16, 32, 32), 3, 2, 1),
])
def test_max_pool_memory(name, shape, k, s, p, monkeypatch):
    monkeypatch.setattr(_pool, "_BLOCK_BYTES", 256 * 1024)      # 32 planes of 8 KiB per block
    x = leaf(rand(shape, 1))
    y, extra = temporary_bytes(F.max_pool2d, x, k, s, p)
    index = y.grad_fn.kwargs["index"]
    assert index.dtype == np.intp and index.shape == y.shape
    # the saved indices, plus per-block temporaries: offset bytes, greater mask, the
    # offsets as intp, the padding check's mask (1 + 1 + 8 + 1 bytes per output)
    block_out = 32 * y.shape[2] * y.shape[3]
    assert extra <= index.nbytes + 11 * block_out + SLACK
    rule, args, kw = _rule(y, 0)
    gx, extra = temporary_bytes(rule, *args, **kw)
    assert extra <= SLACK                     # one scatter into the result


@pytest.mark.parametrize("name,shape,k,s,p,inc", [
    ("non_overlapping", (8, 16, 32, 32), 2, 2, 0, True),
    ("overlapping_exclude_pad", (8, 16, 32, 32), 3, 2, 1, False),
])
def test_avg_pool_memory(name, shape, k, s, p, inc, monkeypatch):
    monkeypatch.setattr(_pool, "_BLOCK_BYTES", 256 * 1024)
    x = leaf(rand(shape, 1))
    y, extra = temporary_bytes(F.avg_pool2d, x, k, s, p, count_include_pad=inc)
    assert extra <= SLACK                     # sums straight into the output
    rule, args, kw = _rule(y, 0)
    gx, extra = temporary_bytes(rule, *args, **kw)
    assert extra <= 4 * 8 * y.shape[2] * y.shape[3] + SLACK   # one block of g / divisor
