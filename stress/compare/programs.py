"""Real-program workloads (issue 28): six small models in the style of well-known PyTorch
programs, written once against a library module `lib` (parallel_autograd or torch) so both
libraries run literally the same program from the same weights:

- `gpt`: nanoGPT's model.py (token + position embeddings, pre-norm blocks of causal
  self-attention through `F.scaled_dot_product_attention(is_causal=True)`, as nanoGPT runs
  on torch >= 2, exact-GELU MLP, weight tying, cross-entropy);
- `mnist-cnn`: pytorch/examples mnist/main.py's `Net` (two convs, max-pool, two linears,
  log_softmax + nll_loss; dropout 0: it would draw random numbers);
- `lstm-lm`, `gru-lm`: word_language_model's `RNNModel` (embedding, 2-layer nn.LSTM or
  nn.GRU, tied linear decoder, log_softmax + NLLLoss);
- `transformer-lm`: word_language_model's `TransformerModel` (an nn.Transformer encoder
  with a log(tril) mask and a positional-encoding buffer);
- `dcgan`: dcgan/main.py's generator and discriminator (ConvTranspose2d / BatchNorm2d /
  ReLU / Tanh; Conv2d / LeakyReLU / Sigmoid; BCELoss). One step is one GAN iteration in
  one backward pass: errD on a real batch and on the detached fake batch, plus errG on
  the fake batch through the discriminator (the program's three backward calls do the same
  work; only netD's gradient also gets errG's part, which the program zeroes).

Every model is built in the library's default dtype and then moved to the workload's
dtype explicitly (`Module.to`); inputs are made in that dtype. Parameters are then set by
name from `init_array` (a generator seeded from the run's seed and the parameter's name),
so the parallel_autograd model and the torch model start from bitwise the same weights in
any process. The training step around them (zero_grad, forward, backward, Adam) is
`stress.compare.step`'s, as for every workload.
"""
from __future__ import annotations

import math
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

DTYPES = ("f32", "f64")
_NP = {"f32": np.float32, "f64": np.float64}


@dataclass
class Program:
    """One library's persistent model of a workload: `leaves` (its parameters, in
    `named_parameters` order) and `loss()` (records one forward pass)."""
    leaves: list
    loss: Callable
    modules: dict


def init_array(seed: int, name: str, shape: tuple, dtype) -> np.ndarray:
    """The initial value of parameter `name`: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
    for weights of rank >= 2; norm scales (`weight` of rank 1) 1 + U(-0.1, 0.1); biases
    U(-0.1, 0.1). Seeded from `seed` and `name` only."""
    rng = np.random.default_rng(zlib.crc32(f"{seed}|{name}".encode()))
    if len(shape) >= 2:
        bound = 1 / math.sqrt(int(np.prod(shape[1:])))
        a = rng.uniform(-bound, bound, shape)
    elif name.endswith("weight"):
        a = 1 + rng.uniform(-0.1, 0.1, shape)
    else:
        a = rng.uniform(-0.1, 0.1, shape)
    return a.astype(dtype)


def set_weights(lib, modules: dict, seed: int, dtype) -> list:
    """Every parameter of `modules` (name -> module) moved to `dtype` and set from
    `init_array`; the parameters, in order."""
    leaves = []
    for key, m in modules.items():
        m.to(getattr(lib, np.dtype(dtype).name))
        for n, p in m.named_parameters():
            with lib.no_grad():
                p.copy_(lib.from_numpy(init_array(seed, f"{key}.{n}", tuple(p.shape), dtype)))
            leaves.append(p)
    return leaves


# ---- gpt (nanoGPT) ---------------------------------------------------------------------
def _gpt_modules(lib, vocab, block, n_layer, n_head, n_embd):
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets):
            t = idx.size(1)
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return {"model": GPT()}


def gpt_data(rng, batch, block, vocab, n_layer, n_head, n_embd, dtype=None):
    tokens = rng.integers(0, vocab, (batch, block + 1))
    return {"x": tokens[:, :-1].copy(), "y": tokens[:, 1:].copy()}


def gpt(lib, d, dims):
    ms = _gpt_modules(lib, dims["vocab"], dims["block"], dims["n_layer"], dims["n_head"],
                      dims["n_embd"])
    x, y = lib.from_numpy(d["x"]), lib.from_numpy(d["y"])
    return ms, lambda: ms["model"](x, y)


# ---- mnist-cnn (pytorch/examples mnist) ------------------------------------------------
def _mnist_modules(lib, c1, c2, hidden, image):
    nn, F = lib.nn, lib.nn.functional
    flat = c2 * ((image - 4) // 2) ** 2

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, c1, 3, 1), nn.Conv2d(c1, c2, 3, 1)
            self.fc1, self.fc2 = nn.Linear(flat, hidden), nn.Linear(hidden, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.relu(self.fc1(lib.flatten(x, 1)))
            return F.log_softmax(self.fc2(x), dim=1)

    return {"model": Net()}


def mnist_data(rng, batch, image, c1, c2, hidden, dtype):
    return {"x": rng.standard_normal((batch, 1, image, image)).astype(dtype),
            "y": rng.integers(0, 10, batch)}


def mnist(lib, d, dims):
    ms = _mnist_modules(lib, dims["c1"], dims["c2"], dims["hidden"], dims["image"])
    x, y = lib.from_numpy(d["x"]), lib.from_numpy(d["y"])
    nll = lib.nn.functional.nll_loss
    return ms, lambda: nll(ms["model"](x), y)


# ---- lstm-lm, gru-lm, transformer-lm (pytorch/examples word_language_model) ------------
def _rnn_modules(lib, rnn_type, ntoken, ninp, nlayers):
    nn, F = lib.nn, lib.nn.functional

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = getattr(nn, rnn_type)(ninp, ninp, nlayers)
            self.decoder = nn.Linear(ninp, ntoken)
            self.decoder.weight = self.encoder.weight  # tie_weights

        def forward(self, input, hidden):
            output, hidden = self.rnn(self.encoder(input), hidden)
            decoded = self.decoder(output).view(-1, ntoken)
            return F.log_softmax(decoded, dim=1), hidden

    return {"model": RNNModel()}


def _transformer_modules(lib, ntoken, ninp, nhead, nhid, nlayers, seq):
    nn, F = lib.nn, lib.nn.functional

    class PositionalEncoding(nn.Module):
        def __init__(self):
            super().__init__()
            # float64, then Module.to: the same table in both libraries (to 1 ulp)
            pe = lib.zeros(seq, ninp, dtype=lib.float64)
            position = lib.arange(0, seq, dtype=lib.float64).unsqueeze(1)
            div_term = lib.exp(lib.arange(0, ninp, 2).double() * (-math.log(10000.0) / ninp))
            pe[:, 0::2] = lib.sin(position * div_term)
            pe[:, 1::2] = lib.cos(position * div_term)
            self.register_buffer('pe', pe.unsqueeze(0).transpose(0, 1))

        def forward(self, x):
            return x + self.pe[:x.size(0), :]

    class TransformerModel(nn.Transformer):
        def __init__(self):
            super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                             num_encoder_layers=nlayers, dropout=0.0)
            self.pos_encoder = PositionalEncoding()
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.decoder = nn.Linear(ninp, ntoken)
            self.src_mask = None

        def forward(self, src):
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                with np.errstate(divide="ignore"):  # log(0) = -inf: the masked places
                    mask = np.log(np.tril(np.ones((len(src), len(src)))))
                self.src_mask = lib.from_numpy(mask).to(self.decoder.weight.dtype)
            src = self.pos_encoder(self.input_emb(src) * math.sqrt(ninp))
            output = self.encoder(src, mask=self.src_mask)
            return F.log_softmax(self.decoder(output), dim=-1)

    return {"model": TransformerModel()}


def lm_data(rng, seq, batch, ntoken, **_):
    tokens = rng.integers(0, ntoken, (seq + 1, batch))
    return {"x": tokens[:-1].copy(), "y": tokens[1:].reshape(-1).copy()}


def rnn_lm(rnn_type):
    """The definition of the LSTM or GRU word language model."""
    def define(lib, d, dims):
        ms = _rnn_modules(lib, rnn_type, dims["ntoken"], dims["ninp"], dims["nlayers"])
        x, y = lib.from_numpy(d["x"]), lib.from_numpy(d["y"])
        shape = (dims["nlayers"], dims["batch"], dims["ninp"])

        def loss():
            w = ms["model"].decoder.weight  # init_hidden: zeros of the weights' dtype
            h = w.new_zeros(*shape)
            hidden = (h, w.new_zeros(*shape)) if rnn_type == "LSTM" else h
            out, _ = ms["model"](x, hidden)
            return lib.nn.functional.nll_loss(out, y)
        return ms, loss
    return define


def transformer_lm(lib, d, dims):
    ms = _transformer_modules(lib, dims["ntoken"], dims["ninp"], dims["nhead"],
                              dims["nhid"], dims["nlayers"], dims["seq"])
    x, y = lib.from_numpy(d["x"]), lib.from_numpy(d["y"])
    nll = lib.nn.functional.nll_loss
    return ms, lambda: nll(ms["model"](x).view(-1, dims["ntoken"]), y)


# ---- dcgan (pytorch/examples dcgan) ----------------------------------------------------
def _dcgan_modules(lib, nz, ngf, ndf, nc):
    nn = lib.nn
    netG = nn.Sequential(  # z -> 4x4 -> 8x8 -> 16x16 -> 32x32
        nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())
    netD = nn.Sequential(  # 32x32 -> 16x16 -> 8x8 -> 4x4 -> 1
        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())
    return {"netG": netG, "netD": netD}


def dcgan_data(rng, batch, nz, ngf, ndf, dtype):
    return {"real": rng.uniform(-1, 1, (batch, 1, 32, 32)).astype(dtype),
            "noise": rng.standard_normal((batch, nz, 1, 1)).astype(dtype)}


def dcgan(lib, d, dims):
    ms = _dcgan_modules(lib, dims["nz"], dims["ngf"], dims["ndf"], 1)
    netG, netD = ms["netG"], ms["netD"]
    real, noise = lib.from_numpy(d["real"]), lib.from_numpy(d["noise"])
    criterion = lib.nn.BCELoss()
    ones = lib.ones(dims["batch"], dtype=real.dtype)
    zeros = lib.zeros(dims["batch"], dtype=real.dtype)

    def loss():
        errD_real = criterion(netD(real).view(-1), ones)
        fake = netG(noise)
        errD_fake = criterion(netD(fake.detach()).view(-1), zeros)
        errG = criterion(netD(fake).view(-1), ones)
        return errD_real + errD_fake + errG
    return ms, loss


# ---- the registry's entries ------------------------------------------------------------
PROGRAMS = {
    # name: (description, definition, data, {size: dims})
    "gpt": ("nanoGPT: 2 layers, 64 wide, 4 heads, block 64, vocab 65, batch 8, SDPA, "
            "GELU, tied head", gpt, gpt_data,
            {"full": dict(batch=8, block=64, vocab=65, n_layer=2, n_head=4, n_embd=64),
             "quick": dict(batch=4, block=32, vocab=65, n_layer=2, n_head=4, n_embd=64),
             "tiny": dict(batch=2, block=5, vocab=11, n_layer=1, n_head=2, n_embd=8)}),
    "mnist-cnn": ("mnist/main.py Net: conv3x3(1->16), conv3x3(16->32), pool, fc 128, "
                  "log_softmax + nll; batch 16, 28x28", mnist, mnist_data,
                  {"full": dict(batch=16, image=28, c1=16, c2=32, hidden=128),
                   "quick": dict(batch=16, image=20, c1=8, c2=16, hidden=64),
                   "tiny": dict(batch=2, image=8, c1=2, c2=3, hidden=4)}),
    "lstm-lm": ("word_language_model: 2-layer nn.LSTM 128, tied decoder, vocab 500, "
                "bptt 32, batch 16", rnn_lm("LSTM"), lm_data,
                {"full": dict(seq=32, batch=16, ntoken=500, ninp=128, nlayers=2),
                 "quick": dict(seq=16, batch=8, ntoken=500, ninp=64, nlayers=2),
                 "tiny": dict(seq=3, batch=2, ntoken=7, ninp=4, nlayers=2)}),
    "gru-lm": ("word_language_model: 2-layer nn.GRU 128, tied decoder, vocab 500, "
               "bptt 32, batch 16", rnn_lm("GRU"), lm_data,
               {"full": dict(seq=32, batch=16, ntoken=500, ninp=128, nlayers=2),
                "quick": dict(seq=16, batch=8, ntoken=500, ninp=64, nlayers=2),
                "tiny": dict(seq=3, batch=2, ntoken=7, ninp=4, nlayers=2)}),
    "transformer-lm": ("word_language_model: nn.Transformer encoder, 2 layers, model 128, "
                       "4 heads, ffn 256, vocab 500, bptt 32, batch 8", transformer_lm,
                       lm_data,
                       {"full": dict(seq=32, batch=8, ntoken=500, ninp=128, nhead=4,
                                     nhid=256, nlayers=2),
                        "quick": dict(seq=16, batch=8, ntoken=500, ninp=64, nhead=2,
                                      nhid=128, nlayers=2),
                        "tiny": dict(seq=3, batch=2, ntoken=7, ninp=4, nhead=2, nhid=6,
                                     nlayers=1)}),
    "dcgan": ("dcgan/main.py: G and D of 4 layers each on 32x32, nz 32, 16 base channels, "
              "batch 16; errD(real) + errD(fake.detach()) + errG", dcgan, dcgan_data,
              {"full": dict(batch=16, nz=32, ngf=16, ndf=16),
               "quick": dict(batch=8, nz=16, ngf=8, ndf=8),
               "tiny": dict(batch=2, nz=3, ngf=2, ndf=2)}),
}


def program_data(name: str, dtype: str) -> Callable:
    """`(rng, **dims) -> data` of program `name` in `dtype` ("f32" or "f64"), with the
    seed of its weights (`init_array`) drawn from `rng`."""
    make = PROGRAMS[name][2]

    def data(rng, **dims):
        d = make(rng, dtype=_NP[dtype], **dims)
        d["weight_seed"] = int(rng.integers(2 ** 31))
        return d
    return data


def program(name: str, dtype: str) -> Callable:
    """`(data, backend) -> Program`: program `name`'s model in the backend's library,
    moved to `dtype` and set to the seeded weights."""
    definition = PROGRAMS[name][1]

    def make(data, B) -> Program:
        with warnings.catch_warnings():  # torch's nn.Transformer warns on every build
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            ms, loss = definition(B.lib, data, data["_dims"])
        leaves = set_weights(B.lib, ms, data["weight_seed"], _NP[dtype])
        return Program(leaves, loss, ms)
    return make
