"""pa.nn.utils.rnn: PackedSequence, pack_padded_sequence, pad_packed_sequence,
pad_sequence, pack_sequence, unpad_sequence, unpack_sequence against torch.nn.utils.rnn
(values, layout, permutations, gradients through packing and padding), both engines, bad
input; and the recurrent layers on packed input (tests/test_nn_rnn.py has the layers)."""
from __future__ import annotations

import numpy as np
import pytest

import parallel_autograd as pa
from conftest import assert_bitwise
from parallel_autograd.nn.utils import rnn as R

LENGTHS = [[5, 3, 3, 1], [3, 5, 1, 4], [2], [4, 4, 4]]


def _torch():
    return pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t.data)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_match_torch_with_gradients(lengths, batch_first):
    torch = _torch()
    tr = torch.nn.utils.rnn
    b, steps = len(lengths), max(lengths) + 1          # one step of padding beyond
    shape = (b, steps, 3) if batch_first else (steps, b, 3)
    x = np.random.default_rng(len(lengths)).standard_normal(shape)
    sort = lengths != sorted(lengths, reverse=True)
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    p = R.pack_padded_sequence(xp, lengths, batch_first, enforce_sorted=not sort)
    tp = tr.pack_padded_sequence(xt, lengths, batch_first, enforce_sorted=not sort)
    np.testing.assert_array_equal(_np(p.data), _np(tp.data))
    np.testing.assert_array_equal(_np(p.batch_sizes), tp.batch_sizes.numpy())
    for ours, theirs in ((p.sorted_indices, tp.sorted_indices),
                         (p.unsorted_indices, tp.unsorted_indices)):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            np.testing.assert_array_equal(_np(ours), theirs.numpy())
    out, lens = R.pad_packed_sequence(p, batch_first, padding_value=-2.0, total_length=steps + 1)
    tout, tlens = tr.pad_packed_sequence(tp, batch_first, padding_value=-2.0,
                                         total_length=steps + 1)
    np.testing.assert_array_equal(_np(out), _np(tout))
    np.testing.assert_array_equal(_np(lens), tlens.numpy())
    w = np.random.default_rng(9).standard_normal(out.shape)
    pa.backward((out * pa.tensor(w)).sum())
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(xp.grad, xt.grad.numpy())   # 0 at the padding


def test_pad_sequence_pack_sequence_and_unpacking_match_torch():
    torch = _torch()
    tr = torch.nn.utils.rnn
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((n, 2, 2)) for n in (2, 5, 3)]
    ours = [pa.tensor(s, requires_grad=True) for s in seqs]
    theirs = [torch.tensor(s, requires_grad=True) for s in seqs]
    for side in ("right", "left"):
        for bf in (False, True):
            a = R.pad_sequence(ours, bf, 7.0, side)
            b = tr.pad_sequence(theirs, bf, 7.0, side)
            np.testing.assert_array_equal(_np(a), _np(b))
    packed = R.pack_sequence(ours, enforce_sorted=False)
    tpacked = tr.pack_sequence(theirs, enforce_sorted=False)
    np.testing.assert_array_equal(_np(packed.data), _np(tpacked.data))
    back = R.unpack_sequence(packed)
    for u, s in zip(back, seqs):
        np.testing.assert_array_equal(_np(u), s)
    pa.backward(sum((u * u).sum() for u in back))
    for o, s in zip(ours, seqs):
        np.testing.assert_array_equal(o.grad, 2 * s)
    padded = R.pad_sequence(ours, batch_first=True)
    for u, s in zip(R.unpad_sequence(padded, [2, 5, 3], batch_first=True), seqs):
        np.testing.assert_array_equal(_np(u), s)


def test_engines_agree_bitwise():
    rng = np.random.default_rng(4)
    x = pa.tensor(rng.standard_normal((6, 4, 3)), requires_grad=True)

    def loss():
        p = R.pack_padded_sequence(x * 2.0, [2, 6, 3, 3], enforce_sorted=False)
        out, _ = R.pad_packed_sequence(p, padding_value=1.0)
        return (out * out).sum()

    pa.backward(loss())
    want, x.grad = x.grad, None
    eng = pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    eng.backward(loss())
    eng.close()
    assert_bitwise([want], [x.grad])
    assert pa.gradgradcheck(lambda a: R.pad_packed_sequence(
        R.pack_padded_sequence(a * a, [3, 1], enforce_sorted=False))[0],
        [pa.tensor(rng.standard_normal((3, 2, 2)), requires_grad=True)])


def test_packed_sequence_methods():
    p = R.pack_sequence([pa.ones(3, 2), pa.ones(1, 2)])
    assert p.float().data.dtype == np.float32 and p.double().data.dtype == np.float64
    assert not p.is_cuda and p.sorted_indices is None
    data, batch_sizes, _, _ = p                          # a tuple, as PyTorch's
    assert data.shape == (4, 2) and batch_sizes.tolist() == [2, 1, 1]


def test_bad_input():
    x = pa.tensor(np.zeros((4, 3, 2)))
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        R.pack_padded_sequence(x, [1, 3, 2])
    with pytest.raises(RuntimeError, match="greater than 0"):
        R.pack_padded_sequence(x, [3, 0, 0])
    with pytest.raises(ValueError, match="expected 3 lengths"):
        R.pack_padded_sequence(x, [3, 2])
    with pytest.raises(ValueError, match="exceeds the input's 4 steps"):
        R.pack_padded_sequence(x, [5, 2, 1])
    with pytest.raises(ValueError, match="1-D sequence of integers"):
        R.pack_padded_sequence(x, [3.0, 2.0, 1.0])
    p = R.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(ValueError, match="total_length to be at least"):
        R.pad_packed_sequence(p, total_length=2)
    with pytest.raises(ValueError, match="every sequence must be"):
        R.pad_sequence([pa.ones(2, 3), pa.ones(2, 4)])
    with pytest.raises(ValueError, match="padding_side"):
        R.pad_sequence([pa.ones(2, 3)], padding_side="middle")


# ---- the recurrent layers on packed sequences --------------------------------------------
def _twins(mode, seed, **kw):
    torch = _torch()
    pa.manual_seed(seed)
    m = getattr(pa.nn, mode)(5, 7, **kw)
    tm = getattr(torch.nn, mode)(5, 7, **kw).double()
    with torch.no_grad():
        for (n, p), (tn, tp) in zip(m.named_parameters(), tm.named_parameters()):
            assert n == tn
            tp.copy_(torch.tensor(p.numpy()))
    return m, tm


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("lengths", [[3, 6, 1, 4], [6, 6, 2]])
def test_layers_on_packed_sequences_match_torch(mode, bidirectional, lengths):
    torch = _torch()
    tr = torch.nn.utils.rnn
    m, tm = _twins(mode, 1, num_layers=2, bidirectional=bidirectional)
    rng = np.random.default_rng(len(lengths))
    b = len(lengths)
    x = rng.standard_normal((6, b, 5))
    h0 = rng.standard_normal((4 if bidirectional else 2, b, 7))
    xp, xt = pa.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    hp, ht = pa.tensor(h0, requires_grad=True), torch.tensor(h0, requires_grad=True)
    cp, ct = pa.tensor(-h0, requires_grad=True), torch.tensor(-h0, requires_grad=True)
    hx, thx = ((hp, cp), (ht, ct)) if mode == "LSTM" else (hp, ht)
    sort = lengths != sorted(lengths, reverse=True)
    out, hn = m(R.pack_padded_sequence(xp, lengths, enforce_sorted=not sort), hx)
    tout, thn = tm(tr.pack_padded_sequence(xt, lengths, enforce_sorted=not sort), thx)
    assert isinstance(out, R.PackedSequence)
    np.testing.assert_array_equal(_np(out.batch_sizes), tout.batch_sizes.numpy())
    states = hn if mode == "LSTM" else (hn,)
    tstates = thn if mode == "LSTM" else (thn,)
    o, t = R.pad_packed_sequence(out)[0], tr.pad_packed_sequence(tout)[0]
    loss = (o * o).sum() + sum((s * s * s).sum() for s in states)
    tloss = (t * t).sum() + sum((s * s * s).sum() for s in tstates)
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-13)
    for s, ts in zip(states, tstates):          # each sequence's last step, caller's order
        np.testing.assert_allclose(_np(s), _np(ts), rtol=1e-12, atol=1e-14)
    pa.backward(loss)
    tloss.backward()
    for a, ta in [(xp, xt), (hp, ht)] + ([(cp, ct)] if mode == "LSTM" else []) + \
            list(zip(m.parameters(), tm.parameters())):
        np.testing.assert_allclose(a.grad, ta.grad.numpy(), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_packed_layers_engines_bitwise_and_second_order(mode):
    pa.manual_seed(2)
    m = getattr(pa.nn, mode)(3, 4, bidirectional=True)
    rng = np.random.default_rng(3)
    x = pa.tensor(rng.standard_normal((4, 3, 3)), requires_grad=True)

    def loss(a):
        out, _ = m(R.pack_padded_sequence(a, [2, 4, 1], enforce_sorted=False))
        return (R.pad_packed_sequence(out)[0] ** 2).sum()

    pa.backward(loss(x))
    want, x.grad = x.grad, None
    eng = pa.Engine(2, min_nodes=1, min_work=0, min_width=0, inline_below=0)
    eng.backward(loss(x))
    eng.close()
    assert_bitwise([want], [x.grad])
    np.testing.assert_array_equal(want[2:, 2], 0)       # past the last sequence's end
    assert pa.gradcheck(loss, [x]) and pa.gradgradcheck(loss, [x])


def test_packed_layers_bad_input():
    m = pa.nn.GRU(3, 4)
    p = R.pack_sequence([pa.ones(3, 3), pa.ones(2, 3)])
    with pytest.raises(ValueError, match="Expected hidden size"):
        m(p, pa.zeros(1, 3, 4))
    with pytest.raises(TypeError, match="hx must be a tensor"):
        m(p, (pa.zeros(1, 2, 4),))
    with pytest.raises(ValueError, match="packed data must be"):
        m(R.pack_sequence([pa.ones(3, 5)]))
    lstm = pa.nn.LSTM(3, 4)
    with pytest.raises(TypeError, match="hx must be a tuple"):
        lstm(p, pa.zeros(1, 2, 4))


def test_packed_input_ignores_batch_first_as_torch():
    pa.manual_seed(4)
    a = pa.nn.LSTM(3, 4)
    b = pa.nn.LSTM(3, 4, batch_first=True)
    b.load_state_dict(a.state_dict())
    p = R.pack_sequence([pa.randn(5, 3, seed=1), pa.randn(2, 3, seed=2)])
    (oa, (ha, ca)), (ob, (hb, cb)) = a(p), b(p)
    for u, v in ((oa.data, ob.data), (ha, hb), (ca, cb)):
        np.testing.assert_array_equal(_np(u), _np(v))
