"""Values and gradients against PyTorch (float64, same data): whole models (MLP, CNN,
transformer block with LoRA adapters, unrolled LSTM cell) and every nn.functional op."""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F
from op_samples import SAMPLES

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = 1e-10


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def close(a, b, tol=TOL):
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    a = a.numpy() if isinstance(a, pa.Tensor) else a
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


class Params:
    """The same named arrays as pa leaves and torch leaves (float64)."""

    def __init__(self, arrays: dict, trainable=None):
        trainable = set(arrays) if trainable is None else set(trainable)
        self.names = list(arrays)
        self.trainable = [n for n in self.names if n in trainable]
        self.pa = {n: pa.tensor(a, requires_grad=n in trainable) for n, a in arrays.items()}
        self.th = {n: torch.tensor(a, requires_grad=n in trainable) for n, a in arrays.items()}

    def check_grads(self, loss_pa, loss_th):
        close(loss_pa, loss_th)
        loss_pa.backward()
        loss_th.backward()
        for n in self.names:
            p, t = self.pa[n], self.th[n]
            if n in self.trainable:
                close(p.grad, t.grad)
            else:
                assert p.grad is None and t.grad is None, n


# ---- (a) MLP --------------------------------------------------------------------------
def test_mlp_parity():
    P = Params({"x": rand((8, 5), 0), "w1": rand((16, 5), 1), "b1": rand(16, 2),
                "w2": rand((16, 16), 3) / 4, "b2": rand(16, 4), "w3": rand((3, 16), 5),
                "b3": rand(3, 6), "y": rand((8, 3), 7)}, trainable=["x", "w1", "b1", "w2",
                                                                    "b2", "w3", "b3"])

    def model(p, f, act):
        h = act(f.linear(p["x"], p["w1"], p["b1"]))
        h = f.gelu(f.linear(h, p["w2"], p["b2"]))
        return f.mse_loss(f.linear(h, p["w3"], p["b3"]), p["y"])

    P.check_grads(model(P.pa, F, pa.tanh), model(P.th, TF, torch.tanh))


# ---- (b) small CNN -----------------------------------------------------------------------
def test_cnn_parity():
    P = Params({"x": rand((3, 2, 10, 10), 0), "c1": rand((4, 2, 3, 3), 1) / 2,
                "cb1": rand(4, 2), "c2": rand((6, 4, 3, 3), 3) / 3, "cb2": rand(6, 4),
                "w": rand((5, 24), 5) / 4, "b": rand(5, 6)})
    targets = np.array([1, 4, 0])

    def model(p, f, flatten):
        h = f.max_pool2d(f.relu(f.conv2d(p["x"], p["c1"], p["cb1"], padding=1)), 2)  # 4x5x5
        h = f.relu(f.conv2d(h, p["c2"], p["cb2"], stride=1, padding=1))             # 6x5x5
        h = f.avg_pool2d(h, 3, stride=2, padding=1)                                    # 6x3x3
        h = f.max_pool2d(h, 2, stride=1)                                               # 6x2x2
        return f.cross_entropy(f.linear(flatten(h), p["w"], p["b"]), targets_of(f))

    def targets_of(f):
        return targets if f is F else torch.tensor(targets)

    P.check_grads(model(P.pa, F, lambda t: pa.flatten(t, 1)),
                  model(P.th, TF, lambda t: torch.flatten(t, 1)))


# ---- (c) transformer block with LoRA adapters on frozen weights -------------------------
D, HEADS, RANK, ALPHA = 8, 2, 2, 4.0


def _transformer_params():
    frozen = {"ln1_w": 1 + rand(D, 1) / 5, "ln1_b": rand(D, 2) / 5,
              "ln2_w": 1 + rand(D, 3) / 5, "ln2_b": rand(D, 4) / 5}
    for i, n in enumerate(["q", "k", "v", "o"]):
        frozen[f"W{n}"] = rand((D, D), 10 + i) / np.sqrt(D)
        frozen[f"b{n}"] = rand(D, 20 + i) / 5
    frozen.update({"Wfc1": rand((4 * D, D), 30) / np.sqrt(D), "bfc1": rand(4 * D, 31) / 5,
                   "Wfc2": rand((D, 4 * D), 32) / np.sqrt(4 * D), "bfc2": rand(D, 33) / 5})
    adapters = {}
    for i, (n, out_f, in_f) in enumerate([("q", D, D), ("v", D, D), ("fc1", 4 * D, D)]):
        adapters[f"A{n}"] = rand((RANK, in_f), 40 + i) / 2
        adapters[f"B{n}"] = rand((out_f, RANK), 50 + i) / 2   # nonzero so A gets gradient
    x = {"x": rand((2, 5, D), 60)}
    return Params({**frozen, **adapters, **x}, trainable=list(adapters) + ["x"])


def _block(p, f, lib, use_sdpa):
    x = p["x"]
    B, T, _ = x.shape

    def lora(h, n):
        base = f.linear(h, p[f"W{n}"], p[f"b{n}"])
        return base + f.linear(f.linear(h, p[f"A{n}"]), p[f"B{n}"]) * (ALPHA / RANK)

    def heads(t):       # (B, T, D) -> (B, H, T, D/H)
        return t.reshape(B, T, HEADS, D // HEADS).permute(0, 2, 1, 3)

    h = f.layer_norm(x, (D,), p["ln1_w"], p["ln1_b"])
    q, k, v = heads(lora(h, "q")), heads(f.linear(h, p["Wk"], p["bk"])), heads(lora(h, "v"))
    if use_sdpa:
        a = f.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:               # attention from primitives
        scores = q @ k.transpose(-1, -2) if lib is torch else q @ k.mT
        scores = scores / np.sqrt(D // HEADS)
        causal = np.tril(np.ones((T, T), dtype=bool))
        if lib is torch:
            scores = scores.masked_fill(~torch.tensor(causal), float("-inf"))
        else:
            scores = pa.where(causal, scores, -np.inf)
        a = f.softmax(scores, dim=-1) @ v
    a = a.permute(0, 2, 1, 3).reshape(B, T, D)
    x = x + f.linear(a, p["Wo"], p["bo"])
    h = f.gelu(lora(f.layer_norm(x, (D,), p["ln2_w"], p["ln2_b"]), "fc1"))
    x = x + f.linear(h, p["Wfc2"], p["bfc2"])
    w = rand(x.shape, 99)
    return (x * (w if lib is pa else torch.tensor(w))).sum()


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_transformer_block_with_lora_parity(use_sdpa):
    P = _transformer_params()
    P.check_grads(_block(P.pa, F, pa, use_sdpa), _block(P.th, TF, torch, use_sdpa))
    assert all(P.pa[n].grad is None for n in P.names if n not in P.trainable)


# ---- (d) LSTM cell unrolled ---------------------------------------------------------------
def test_lstm_cell_unrolled_parity():
    inp, hid, steps, batch = 3, 4, 5, 2
    cell = torch.nn.LSTMCell(inp, hid, dtype=torch.float64)
    with torch.no_grad():
        for i, prm in enumerate(cell.parameters()):
            prm.copy_(torch.tensor(rand(tuple(prm.shape), i) / 2))
    xs, h0, c0 = rand((steps, batch, inp), 10), rand((batch, hid), 11), rand((batch, hid), 12)
    wt = rand((steps, batch, hid), 13)

    xs_t, h_t, c_t = (torch.tensor(a, requires_grad=True) for a in (xs, h0, c0))
    loss_t, h, c = 0, h_t, c_t
    for s in range(steps):
        h, c = cell(xs_t[s], (h, c))
        loss_t = loss_t + (h * torch.tensor(wt[s])).sum()
    loss_t = loss_t + (c ** 2).sum()
    loss_t.backward()

    W = {n: pa.tensor(prm.detach().numpy(), requires_grad=True)
         for n, prm in cell.named_parameters()}
    xs_p, h_p, c_p = (pa.tensor(a, requires_grad=True) for a in (xs, h0, c0))
    loss_p, h, c = 0, h_p, c_p
    for s in range(steps):
        gates = F.linear(xs_p[s], W["weight_ih"], W["bias_ih"]) + \
            F.linear(h, W["weight_hh"], W["bias_hh"])
        i, f, g, o = pa.split(gates, hid, axis=1)          # PyTorch's gate order
        c = pa.sigmoid(f) * c + pa.sigmoid(i) * pa.tanh(g)
        h = pa.sigmoid(o) * pa.tanh(c)
        loss_p = loss_p + (h * wt[s]).sum()
    loss_p = loss_p + (c ** 2).sum()
    loss_p.backward()

    close(loss_p, loss_t)
    for a, b in [(xs_p, xs_t), (h_p, h_t), (c_p, c_t)]:
        close(a.grad, b.grad)
    for n, prm in cell.named_parameters():
        close(W[n].grad, prm.grad)


# ---- per-op parity ---------------------------------------------------------------------
T5 = np.array([2, 0, 3, 3, 1])
IGN = np.array([2, -100, 3, 0, -100])
CW = np.array([0.5, 2.0, 1.0, 1.5])
BMASK = np.random.default_rng(5).random((4, 6)) > 0.4
BMASK[:, 0] = True


def _t(a):
    return torch.tensor(a)


# name -> (pa fn, torch fn, input shapes)
# max_unpool: per-plane flat indices, distinct except where overlapping 3x3/2 windows share
# a maximum (index 6 twice: written once, as PyTorch)
UNPOOL_2D = np.array([[0, 2, 6], [6, 11, 13]]) + np.zeros((2, 2, 1, 1), int)  # 3x5 planes
UNPOOL_1D = np.array([[[1, 2, 6]], [[0, 3, 5]]])

OPS = {
    "linear": (F.linear, TF.linear, [(3, 4), (5, 4), (5,)]),
    "linear_3d_nobias": (F.linear, TF.linear, [(2, 3, 4), (5, 4)]),
    "linear_4d_1d_weight": (F.linear, TF.linear, [(2, 2, 3, 4), (4,), ()]),
    "conv2d": (F.conv2d, TF.conv2d, [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    "conv2d_stride_pad": (lambda x, w, b: F.conv2d(x, w, b, 2, 1),
                          lambda x, w, b: TF.conv2d(x, w, b, 2, 1),
                          [(2, 3, 7, 6), (4, 3, 3, 2), (4,)]),
    "conv2d_pairs": (lambda x, w: F.conv2d(x, w, stride=(1, 2), padding=(2, 1)),
                     lambda x, w: TF.conv2d(x, w, stride=(1, 2), padding=(2, 1)),
                     [(1, 2, 5, 7), (3, 2, 4, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2),
                   [(2, 3, 6, 5)]),
    "max_pool2d_overlap": (lambda x: F.max_pool2d(x, 3, 2, 1),
                           lambda x: TF.max_pool2d(x, 3, 2, 1), [(2, 2, 7, 8)]),
    "max_pool2d_rect": (lambda x: F.max_pool2d(x, (3, 2), (1, 2), (1, 0)),
                        lambda x: TF.max_pool2d(x, (3, 2), (1, 2), (1, 0)), [(1, 2, 5, 6)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2), [(2, 3, 6, 5)]),
    "avg_pool2d_overlap": (lambda x: F.avg_pool2d(x, 3, 2, 1),
                           lambda x: TF.avg_pool2d(x, 3, 2, 1), [(2, 2, 7, 8)]),
    "avg_pool2d_exclude_pad": (lambda x: F.avg_pool2d(x, (3, 2), 1, 1, count_include_pad=False),
                               lambda x: TF.avg_pool2d(x, (3, 2), 1, 1,
                                                       count_include_pad=False), [(1, 2, 5, 6)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
                   lambda x, w, b: TF.layer_norm(x, (3, 4), w, b), [(2, 3, 4), (3, 4), (3, 4)]),
    "layer_norm_plain": (lambda x: F.layer_norm(x, (4,)), lambda x: TF.layer_norm(x, (4,)),
                         [(5, 4)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4,), w), lambda x, w: TF.rms_norm(x, (4,), w),
                 [(2, 3, 4), (4,)]),
    "rms_norm_eps": (lambda x: F.rms_norm(x, (3, 4), eps=0.1),
                     lambda x: TF.rms_norm(x, (3, 4), eps=0.1), [(2, 3, 4)]),
    "embedding": (lambda w: F.embedding(np.array([[1, 3, 1], [0, 1, 3]]), w, padding_idx=3),
                  lambda w: TF.embedding(_t(np.array([[1, 3, 1], [0, 1, 3]])), w,
                                         padding_idx=3), [(4, 5)]),
    "dropout_eval": (lambda x: F.dropout(x, 0.5, training=False),
                     lambda x: TF.dropout(x, 0.5, training=False), [(3, 4)]),
    "dropout_p0": (lambda x: F.dropout(x, 0.0), lambda x: TF.dropout(x, 0.0), [(3, 4)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, T5), lambda x: TF.cross_entropy(x, _t(T5)),
                      [(5, 4)]),
    "cross_entropy_none": (lambda x: F.cross_entropy(x, T5, reduction="none"),
                           lambda x: TF.cross_entropy(x, _t(T5), reduction="none"), [(5, 4)]),
    "cross_entropy_sum_ignore": (
        lambda x: F.cross_entropy(x, IGN, reduction="sum"),
        lambda x: TF.cross_entropy(x, _t(IGN), reduction="sum"), [(5, 4)]),
    "cross_entropy_ignore_mean": (lambda x: F.cross_entropy(x, IGN),
                                  lambda x: TF.cross_entropy(x, _t(IGN)), [(5, 4)]),
    "cross_entropy_weight_smoothing": (
        lambda x: F.cross_entropy(x, IGN, CW, label_smoothing=0.2),
        lambda x: TF.cross_entropy(x, _t(IGN), _t(CW), label_smoothing=0.2), [(5, 4)]),
    "cross_entropy_weight_none": (
        lambda x: F.cross_entropy(x, IGN, CW, reduction="none", label_smoothing=0.1),
        lambda x: TF.cross_entropy(x, _t(IGN), _t(CW), reduction="none",
                                   label_smoothing=0.1), [(5, 4)]),
    "nll_loss": (lambda x: F.nll_loss(x, T5), lambda x: TF.nll_loss(x, _t(T5)), [(5, 4)]),
    "nll_loss_weight": (lambda x: F.nll_loss(x, IGN, CW), lambda x: TF.nll_loss(x, _t(IGN), _t(CW)),
                        [(5, 4)]),
    "mse_loss": (F.mse_loss, TF.mse_loss, [(3, 4), (3, 4)]),
    "mse_loss_sum": (lambda a, b: F.mse_loss(a, b, reduction="sum"),
                     lambda a, b: TF.mse_loss(a, b, reduction="sum"), [(3, 4), (3, 4)]),
    "sdpa": (F.scaled_dot_product_attention, TF.scaled_dot_product_attention,
             [(2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 2)]),
    "sdpa_causal_scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                         scale=0.3),
                          lambda q, k, v: TF.scaled_dot_product_attention(
                              q, k, v, is_causal=True, scale=0.3),
                          [(2, 4, 5), (2, 4, 5), (2, 4, 3)]),
    "sdpa_bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, BMASK),
                       lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, _t(BMASK)),
                       [(2, 4, 5), (2, 6, 5), (2, 6, 3)]),
    "sdpa_float_mask": (F.scaled_dot_product_attention, TF.scaled_dot_product_attention,
                        [(2, 4, 5), (2, 6, 5), (2, 6, 3), (4, 6)]),
    "relu": (F.relu, TF.relu, [(3, 4)]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2), [(3, 4)]),
    "gelu": (F.gelu, TF.gelu, [(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh"), [(3, 4)]),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
                 lambda x: TF.softplus(x, beta=2.0, threshold=3.0), [(3, 4)]),
    "softsign": (F.softsign, TF.softsign, [(3, 4)]),
    "mish": (F.mish, TF.mish, [(3, 4)]),
    "elu": (lambda x: F.elu(x, alpha=0.7), lambda x: TF.elu(x, alpha=0.7), [(3, 4)]),
    "selu": (F.selu, TF.selu, [(3, 4)]),
    "celu": (lambda x: F.celu(x, alpha=1.5), lambda x: TF.celu(x, alpha=1.5), [(3, 4)]),
    "hardtanh": (lambda x: F.hardtanh(x, -0.8, 0.6), lambda x: TF.hardtanh(x, -0.8, 0.6),
                 [(3, 4)]),
    # torch's own kernel (its gradient factor is 1/6 rounded to float32: pa's too)
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, [(3, 4)]),
    "hardswish": (lambda x: F.hardswish(x * 4), lambda x: TF.hardswish(x * 4), [(3, 4)]),
    "logsigmoid": (F.logsigmoid, TF.logsigmoid, [(3, 4)]),
    "prelu": (F.prelu, TF.prelu, [(2, 3, 4), (3,)]),
    "glu": (lambda x: F.glu(x, dim=0), lambda x: TF.glu(x, dim=0), [(4, 3)]),
    "normalize": (lambda x: F.normalize(x, p=3.0, dim=0), lambda x: TF.normalize(x, p=3.0, dim=0),
                  [(3, 4)]),
    "relu6": (lambda x: F.relu6(x * 4 + 1), lambda x: TF.relu6(x * 4 + 1), [(3, 4)]),
    "softmin": (lambda x: F.softmin(x, 1), lambda x: TF.softmin(x, 1), [(3, 4)]),
    "one_hot_mask": (lambda x: x * F.one_hot(pa.tensor([0, 2, 1]), 4).to(x.dtype),
                     lambda x: x * TF.one_hot(torch.tensor([0, 2, 1]), 4).to(x.dtype), [(3, 4)]),
    "conv1d_groups": (lambda x, w, b: F.conv1d(x, w, b, 2, 1, 2, 2),
                      lambda x, w, b: TF.conv1d(x, w, b, 2, 1, 2, 2), [(2, 4, 9), (6, 2, 3), (6,)]),
    "conv3d_same": (lambda x, w: F.conv3d(x, w, padding="same"),
                    lambda x, w: TF.conv3d(x, w, padding="same"),
                    [(1, 2, 4, 3, 4), (2, 2, 3, 2, 3)]),
    "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x, w, None, 2, 1, 1),
                         lambda x, w: TF.conv_transpose1d(x, w, None, 2, 1, 1),
                         [(2, 3, 5), (3, 2, 3)]),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1, 2, 2),
                         lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1, 1, 2, 2),
                         [(2, 4, 3, 4), (4, 1, 3, 3), (2,)]),
    "conv_transpose3d": (lambda x, w: F.conv_transpose3d(x, w, stride=2),
                         lambda x, w: TF.conv_transpose3d(x, w, stride=2),
                         [(1, 2, 2, 3, 2), (2, 2, 2, 2, 2)]),
    "unfold": (lambda x: F.unfold(x, (2, 3), 2, 1, 2), lambda x: TF.unfold(x, (2, 3), 2, 1, 2),
               [(2, 3, 6, 7)]),
    "fold": (lambda x: F.fold(x, (5, 6), 3, 1, 1, 2), lambda x: TF.fold(x, (5, 6), 3, 1, 1, 2),
             [(2, 18, 9)]),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, 2, 1, 2, True),
                   lambda x: TF.max_pool1d(x, 3, 2, 1, 2, True), [(2, 3, 11)]),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, 2, 1, True, False),
                   lambda x: TF.avg_pool1d(x, 3, 2, 1, True, False), [(2, 3, 10)]),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 4),
                            lambda x: TF.adaptive_avg_pool1d(x, 4), [(2, 3, 10)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
                            lambda x: TF.adaptive_avg_pool2d(x, (3, 4)), [(2, 3, 7, 9)]),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4),
                            lambda x: TF.adaptive_max_pool1d(x, 4), [(2, 3, 10)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 4)),
                            lambda x: TF.adaptive_max_pool2d(x, (3, 4)), [(2, 3, 7, 9)]),
    "interpolate_bicubic": (lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"),
                            lambda x: TF.interpolate(x, scale_factor=1.5, mode="bicubic"),
                            [(2, 2, 4, 5)]),
    "upsample_bilinear": (  # torch.nn.functional.upsample is interpolate (deprecated name)
        lambda x: F.upsample(x, size=(5, 7), mode="bilinear", align_corners=True),
        lambda x: TF.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True),
        [(2, 2, 3, 4)]),
    "upsample_nearest": (lambda x: F.upsample_nearest(x, scale_factor=2),
                         lambda x: TF.upsample_nearest(x, scale_factor=2), [(2, 2, 3, 4)]),
    "upsample_bilinear_alias": (lambda x: F.upsample_bilinear(x, size=(5, 7)),
                                lambda x: TF.upsample_bilinear(x, size=(5, 7)),
                                [(2, 2, 3, 4)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 3), lambda x: TF.pixel_shuffle(x, 3),
                      [(2, 9, 2, 3)]),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), lambda x: TF.pixel_unshuffle(x, 2),
                        [(2, 2, 4, 6)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 2, 1), True),
                   lambda x: TF.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 2, 1), True),
                   [(2, 2, 5, 6, 7)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 3, 2, 1, True, True, 5),
                   lambda x: TF.avg_pool3d(x, 3, 2, 1, True, True, 5), [(2, 2, 5, 6, 7)]),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, None, 3)),
                            lambda x: TF.adaptive_avg_pool3d(x, (2, None, 3)), [(2, 3, 5, 4)]),
    # x * x: a real root for every p; a window of zeros (clip) gets PyTorch's 0 gradient
    "lp_pool1d": (lambda x: F.lp_pool1d(pa.relu(x) * x, 3, 3, 2, True),
                  lambda x: TF.lp_pool1d(torch.relu(x) * x, 3, 3, 2, True), [(2, 3, 9)]),
    "lp_pool2d": (lambda x: F.lp_pool2d(x * x, 1.5, (2, 3)),
                  lambda x: TF.lp_pool2d(x * x, 1.5, (2, 3)), [(2, 2, 5, 7)]),
    "lp_pool3d": (lambda x: F.lp_pool3d(x * x, 2, 2, (1, 2, 2)),
                  lambda x: TF.lp_pool3d(x * x, 2, 2, (1, 2, 2)), [(2, 2, 4, 5, 6)]),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (3, 2, 4)),
                            lambda x: TF.adaptive_max_pool3d(x, (3, 2, 4)), [(2, 2, 5, 6, 7)]),
    "max_unpool2d": (lambda x: F.max_unpool2d(x, UNPOOL_2D, 3, 2, 1),
                     lambda x: TF.max_unpool2d(x, torch.tensor(UNPOOL_2D), 3, 2, 1),
                     [(2, 2, 2, 3)]),
    "max_unpool1d": (lambda x: F.max_unpool1d(x, UNPOOL_1D, 2, output_size=(7,)),
                     lambda x: TF.max_unpool1d(x, torch.tensor(UNPOOL_1D), 2, output_size=(7,)),
                     [(2, 1, 3)]),
    "pad_reflect": (lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"),
                    lambda x: TF.pad(x, (2, 1, 1, 3), mode="reflect"), [(2, 2, 4, 5)]),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 0, 1, 2, 0), mode="replicate"),
                      lambda x: TF.pad(x, (1, 2, 0, 1, 2, 0), mode="replicate"),
                      [(1, 2, 3, 3, 4)]),
    "pad_circular": (lambda x: F.pad(x, (3, 2, 1, 1), mode="circular"),
                     lambda x: TF.pad(x, (3, 2, 1, 1), mode="circular"), [(2, 3, 4, 5)]),
    "pad_constant": (lambda x: F.pad(x, (1, -1, 2, 0), value=0.5),
                     lambda x: TF.pad(x, (1, -1, 2, 0), value=0.5), [(2, 3, 4)]),
    "l1_loss": (F.l1_loss, TF.l1_loss, [(3, 4), (3, 4)]),
    "smooth_l1_loss": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5),
                       lambda x, y: TF.smooth_l1_loss(x, y, beta=0.5), [(3, 4), (3, 4)]),
    "huber_loss": (lambda x, y: F.huber_loss(x, y, "sum", 0.7),
                   lambda x, y: TF.huber_loss(x, y, "sum", 0.7), [(3, 4), (3, 4)]),
    "binary_cross_entropy": (
        lambda x, y: F.binary_cross_entropy(pa.sigmoid(x), pa.sigmoid(y)),
        lambda x, y: TF.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y)),
        [(3, 4), (3, 4)]),
    "binary_cross_entropy_with_logits": (
        lambda x, y: F.binary_cross_entropy_with_logits(
            x, pa.sigmoid(y), pos_weight=np.array([1., 2, .5, 1])),
        lambda x, y: TF.binary_cross_entropy_with_logits(
            x, torch.sigmoid(y), pos_weight=_t(np.array([1., 2, .5, 1]))), [(3, 4), (3, 4)]),
    "kl_div": (lambda x, y: F.kl_div(F.log_softmax(x, 1), F.log_softmax(y, 1),
                                     reduction="batchmean", log_target=True),
               lambda x, y: TF.kl_div(TF.log_softmax(x, 1), TF.log_softmax(y, 1),
                                      reduction="batchmean", log_target=True),
               [(3, 4), (3, 4)]),
    "cosine_embedding_loss": (
        lambda a, b: F.cosine_embedding_loss(a, b, np.array([1, -1, 1]), 0.1),
        lambda a, b: TF.cosine_embedding_loss(a, b, _t(np.array([1, -1, 1])), 0.1),
        [(3, 4), (3, 4)]),
    "margin_ranking_loss": (
        lambda a, b, t: F.margin_ranking_loss(a, b, t, 0.1),
        lambda a, b, t: TF.margin_ranking_loss(a, b, t, 0.1), [(4,), (4,), (4,)]),
    "triplet_margin_loss": (lambda a, p, n: F.triplet_margin_loss(a, p, n, p=3, swap=True),
                            lambda a, p, n: TF.triplet_margin_loss(a, p, n, p=3, swap=True),
                            [(3, 4), (3, 4), (3, 4)]),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
                   lambda x, w, b: TF.batch_norm(x, None, None, w, b, True),
                   [(4, 3, 2), (3,), (3,)]),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      lambda x, w, b: TF.instance_norm(x, weight=w, bias=b),
                      [(2, 3, 4), (3,), (3,)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b),
                   lambda x, w, b: TF.group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    "local_response_norm": (lambda x: F.local_response_norm(x, 3),
                            lambda x: TF.local_response_norm(x, 3), [(2, 4, 3)]),
    "silu": (F.silu, TF.silu, [(3, 4)]),
    "sigmoid": (F.sigmoid, torch.sigmoid, [(3, 4)]),
    "tanh": (F.tanh, torch.tanh, [(3, 4)]),
    "softmax": (lambda x: F.softmax(x, dim=0), lambda x: TF.softmax(x, dim=0), [(3, 4)]),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), lambda x: TF.log_softmax(x, dim=-1),
                    [(2, 3, 4)]),
    # core ops whose edge-case conventions must match PyTorch
    "pow_tensor_tensor": (pa.pow, torch.pow, [(3, 4), (3, 4)]),
    "maximum_ties": (lambda a, b: pa.maximum(a, pa.clip(b, -0.5, 0.5)),
                     lambda a, b: torch.maximum(a, torch.clamp(b, -0.5, 0.5)), [(3, 4), (3, 4)]),
    "max_reduce_ties": (lambda x: pa.amax(pa.clip(x, -0.5, 0.5), axis=1),
                        lambda x: torch.amax(torch.clamp(x, -0.5, 0.5), dim=1), [(3, 6)]),
    "min_reduce_all": (lambda x: pa.min(pa.clip(x, -0.5, 0.5)),
                       lambda x: torch.min(torch.clamp(x, -0.5, 0.5)), [(3, 6)]),
    "var_ddof1": (lambda x: pa.var(x, axis=(0, 2)),
                  lambda x: torch.var(x, dim=(0, 2), correction=1), [(2, 3, 4)]),
    "logsumexp": (lambda x: pa.logsumexp(x, axis=-1, keepdims=True),
                  lambda x: torch.logsumexp(x, dim=-1, keepdim=True), [(3, 4)]),
    "abs_relu_at_zero": (lambda x: pa.abs(pa.relu(x)) + pa.relu(-x),
                         lambda x: torch.abs(torch.relu(x)) + torch.relu(-x), [(3, 4)]),
    "where_broadcast": (lambda a, b: pa.where(BMASK[0], a, b),
                        lambda a, b: torch.where(_t(BMASK[0]), a, b), [(4, 6), (1,)]),
    "getitem_repeats": (lambda x: x[np.array([0, 2, 2, 0]), 1:],
                        lambda x: x[_t(np.array([0, 2, 2, 0])), 1:], [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_parity(name):
    fp, ft, shapes = OPS[name]
    arrays = [rand(s, i + 1) for i, s in enumerate(shapes)]
    if name == "pow_tensor_tensor":
        arrays[0] = np.abs(arrays[0]) + 0.1
        arrays[0][0, :2] = 0.0          # pow's conventions at a zero base:
        arrays[1][0, :2] = 0.0, 1.5     # 0 ** 0 and 0 ** 1.5
    if name.startswith("nll_loss"):
        arrays[0] = -np.abs(arrays[0])  # log-probability-like
    if name == "abs_relu_at_zero":
        arrays[0][0] = 0.0
    tp = [pa.tensor(a, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    yp, yt = fp(*tp), ft(*tt)
    close(yp, yt)
    w = rand(tuple(yt.shape), 0)
    gp = pa.grad(yp, tp, grad_outputs=w, allow_unused=True)
    gt = torch.autograd.grad(yt, tt, torch.tensor(w), allow_unused=True)
    for a, b in zip(gp, gt):
        if b is None:
            assert a is None or not np.any(a.numpy())
        else:
            close(a, b)


@pytest.mark.parametrize("float_mask", [False, True])
def test_sdpa_fully_masked_rows_give_zeros_like_torch(float_mask):
    q, k, v = rand((2, 3, 4), 1), rand((2, 5, 4), 2), rand((2, 5, 3), 3)
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    mask[2, 1:] = False
    if float_mask:
        mask = np.where(mask, 0.0, -np.inf)
    tp = [pa.tensor(a, requires_grad=True) for a in (q, k, v)]
    tt = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    yp = F.scaled_dot_product_attention(*tp, attn_mask=mask)
    yt = TF.scaled_dot_product_attention(*tt, attn_mask=torch.tensor(mask))
    close(yp, yt)
    assert not np.any(yp.numpy()[:, 1])
    yp.sum().backward()
    yt.sum().backward()
    for a, b in zip(tp, tt):
        assert np.all(np.isfinite(a.grad.numpy()))
        close(a.grad, b.grad)


def test_every_functional_op_has_torch_parity():
    keys = {k.replace("sdpa", "scaled_dot_product_attention") for k in OPS}
    tested = {n for n in F.__all__ if any(k == n or k.startswith(n + "_") for k in keys)}
    # the declared ops with samples: tests/test_registry.py compares them with PyTorch
    tested |= {k.rsplit(".", 1)[-1] for k in SAMPLES if "." not in k
               or k.startswith("torch.nn.functional.")}
    assert set(F.__all__) - tested == set()
