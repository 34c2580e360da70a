"""max_unpool1d/2d and MaxUnpool1d/2d: against PyTorch on max pooling's own indices
(overlapping windows included), gradcheck to second order, layers, bad input."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.nn import functional as F

CASES = [(2, (2, 3, 8, 6), 2, None, 0, None), (2, (2, 3, 7, 9), 3, 2, 1, None),
         (1, (2, 3, 10), 2, None, 0, None), (2, (3, 8, 6), 2, 2, 0, (9, 7)),
         (1, (2, 3, 11), 3, 2, 1, (2, 3, 11))]


@pytest.mark.parametrize("nd,shape,k,s,p,size", CASES)
def test_matches_torch_on_pooling_indices(nd, shape, k, s, p, size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(shape) + k)
    tf = torch.nn.functional
    pool = tf.max_pool2d if nd == 2 else tf.max_pool1d
    vt, it = pool(torch.tensor(rng.standard_normal(shape)), k, s, p, return_indices=True)
    v, idx = vt.numpy(), it.numpy()
    unpool = F.max_unpool2d if nd == 2 else F.max_unpool1d
    tunpool = tf.max_unpool2d if nd == 2 else tf.max_unpool1d
    vp, vtt = pa.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    yp, yt = unpool(vp, idx, k, s, p, output_size=size), tunpool(vtt, it, k, s, p,
                                                                 output_size=size)
    assert np.array_equal(yp.numpy(), yt.detach().numpy())
    g = rng.standard_normal(tuple(yt.shape))
    pa.backward(yp, g)
    yt.backward(torch.tensor(g))
    assert np.array_equal(vp.grad, vtt.grad.numpy())


def test_pool_then_unpool_roundtrip_and_second_order():
    rng = np.random.default_rng(3)
    x = pa.tensor(rng.standard_normal((2, 2, 6, 4)), requires_grad=True)
    v, idx = F.max_pool2d(x, 2, return_indices=True)
    y = F.max_unpool2d(v, idx, 2)
    # each window's maximum back in place, zeros elsewhere
    keep = (y.numpy() != 0)
    assert keep.sum() == v.numpy().size and np.array_equal(y.numpy()[keep], x.numpy()[keep])
    vv = pa.tensor(v.numpy(), requires_grad=True)
    f = lambda a: F.max_unpool2d(a, idx, 2).pow(2).sum()  # noqa: E731
    assert pa.gradcheck(f, (vv,)) and pa.gradgradcheck(f, (vv,))
    layer_out = nn.MaxUnpool2d(2)(vv, idx)
    assert np.array_equal(layer_out.numpy(), F.max_unpool2d(vv, idx, 2).numpy())
    assert repr(nn.MaxUnpool1d(3, 2, 1)) == "MaxUnpool1d(kernel_size=3, stride=2, padding=1)"


def test_bad_input():
    v = pa.tensor(np.ones((1, 1, 2, 2)))
    idx = np.array([[[[0, 1], [4, 5]]]])
    with pytest.raises(IndexError, match="invalid max index"):
        F.max_unpool2d(v, idx + 16, 2)
    with pytest.raises(ValueError, match="indices of the input's shape"):
        F.max_unpool2d(v, idx[..., :1], 2)
    with pytest.raises(TypeError, match="indices must be integers"):
        F.max_unpool2d(v, idx.astype(float), 2)
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool2d(v, idx, 2, output_size=(9, 4))
    with pytest.raises(ValueError, match="3-D or 4-D"):
        F.max_unpool2d(pa.tensor(np.ones(3)), np.zeros(3, int), 2)
