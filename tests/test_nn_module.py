"""pa.nn.Module and Parameter: registration, naming, modes, gradients, state dicts,
pickling, seeding, repr, and training with both engines (section 2 of issue 13)."""
from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import nn
from parallel_autograd.random import default_generator, manual_seed


def leaf(a):
    return pa.tensor(a, requires_grad=True)


def classes(nn_ns):
    """The same architecture in pa.nn or torch.nn: a custom module with a shared
    submodule, a buffer, a non-persistent buffer, an absent buffer and containers."""
    zeros = pa.zeros if nn_ns is nn else __import__("torch").zeros

    class Block(nn_ns.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn_ns.Linear(4, 4)
            self.norm = nn_ns.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.proj(x))

    class Net(nn_ns.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn_ns.Linear(3, 4)
            self.shared = Block()
            self.blocks = nn_ns.ModuleList([self.shared, Block(), self.shared])
            self.heads = nn_ns.ModuleDict({"b": nn_ns.Linear(4, 2), "a": nn_ns.Linear(4, 2)})
            self.tail = nn_ns.Sequential(nn_ns.ReLU(), nn_ns.Linear(2, 2, bias=False))
            self.tied = nn_ns.Linear(2, 2)
            self.tied.weight = self.tail[1].weight   # one Parameter in two modules
            self.register_buffer("steps", zeros(3))
            self.register_buffer("scratch", zeros(2), persistent=False)
            self.register_buffer("absent", None)

        def forward(self, x):
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            return self.tied(self.tail(self.heads["a"](h) + self.heads["b"](h)))

    Block.__qualname__, Net.__qualname__ = "Block", "Net"
    return Block, Net


Block, Net = classes(nn)  # module level, so that pickle finds them


def build(nn_ns):
    return Net() if nn_ns is nn else classes(nn_ns)[1]()


def names(iterable):
    return [n for n, _ in iterable]


# ---- registration and naming --------------------------------------------------------
def test_names_and_order_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = build(nn), build(torch.nn)
    for method in ("named_parameters", "named_buffers", "named_modules", "named_children"):
        assert names(getattr(ours, method)()) == names(getattr(theirs, method)()), method
    assert names(ours.named_parameters(remove_duplicate=False)) == \
        names(theirs.named_parameters(remove_duplicate=False))
    assert names(ours.named_parameters(prefix="m", recurse=False)) == \
        names(theirs.named_parameters(prefix="m", recurse=False))
    assert names(ours.blocks.named_parameters(prefix="x")) == \
        names(theirs.blocks.named_parameters(prefix="x"))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)


def test_names_and_order_without_torch():
    m = build(nn)
    assert names(m.named_parameters()) == [
        "embed.weight", "embed.bias", "shared.proj.weight", "shared.proj.bias",
        "shared.norm.weight", "shared.norm.bias", "blocks.1.proj.weight",
        "blocks.1.proj.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
        "heads.b.weight", "heads.b.bias", "heads.a.weight", "heads.a.bias", "tail.1.weight",
        "tied.bias"]
    assert names(m.named_buffers()) == ["steps", "scratch"]
    sd = list(m.state_dict())
    assert sd[0] == "steps" and "scratch" not in sd and "absent" not in sd
    assert "blocks.0.proj.weight" in sd and "blocks.2.proj.weight" in sd  # shared: each name
    assert "tied.weight" in sd
    assert names(m.named_modules())[:4] == ["", "embed", "shared", "shared.proj"]


def test_parameters_are_yielded_once_even_when_shared():
    m = build(nn)
    params = list(m.parameters())
    assert len(params) == len({id(p) for p in params}) == 16
    # the shared block twice more, the tied weight once more
    assert len(list(m.named_parameters(remove_duplicate=False))) == 16 + 4 + 4 + 1
    assert all(isinstance(p, nn.Parameter) and p.is_leaf and p.requires_grad for p in params)
    assert len(list(m.parameters(recurse=False))) == 0
    assert len(list(m.children())) == 6 and len(list(m.modules())) == len(set(m.modules()))


def test_setattr_registers_and_reassigns_like_torch():
    m = nn.Module()
    m.w = nn.Parameter(np.ones(2))
    m.sub = nn.Linear(2, 2)
    m.plain = pa.ones(2)                                   # a plain Tensor: not registered
    assert names(m.named_parameters()) == ["w", "sub.weight", "sub.bias"]
    assert "plain" not in m.state_dict()
    with pytest.raises(TypeError, match="cannot assign .* as parameter 'w'"):
        m.w = pa.ones(2)
    m.w = None                                            # declared, absent
    assert names(m.named_parameters()) == ["sub.weight", "sub.bias"] and m.w is None
    m.sub = nn.Parameter(np.zeros(1))                     # a Parameter replaces the child
    assert "sub" not in m._modules and names(m.named_parameters()) == ["sub"]
    del m.sub
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'sub'"):
        m.sub  # noqa: B018 (the attribute access is what raises)
    m.register_buffer("b", pa.zeros(1))
    with pytest.raises(TypeError, match="buffer 'b'"):
        m.b = np.zeros(1)
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", pa.zeros(1))
    with pytest.raises(KeyError, match="cannot contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", pa.ones(1))
    with pytest.raises(TypeError, match="Parameter or None required"):
        m.register_parameter("nl", leaf([1.0]) * 2)


def test_assigning_before_init_and_missing_forward_are_clear():
    class Forgot(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Forgot()
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_parameter_shares_memory_and_is_a_leaf():
    a = np.ones(3)
    p = nn.Parameter(a)
    a[0] = 7
    assert p.numpy() is a and p.is_leaf and p.requires_grad
    t = pa.tensor([1.0, 2.0])
    q = nn.Parameter(t, requires_grad=False)
    assert q.numpy() is t.numpy() and not q.requires_grad
    assert nn.Parameter(leaf([1.0]) * 3).is_leaf
    assert nn.Parameter().shape == (0,)
    assert repr(nn.Parameter(np.array([1.0, 2.0]))) == \
        "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    with pytest.raises(TypeError, match="floating"):
        nn.Parameter(np.arange(3))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        p += 1


# ---- modes, gradients, misc API -------------------------------------------------------
def test_train_eval_recurse_and_dropout_is_identity_in_eval():
    m = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Dropout(0.5),
                                                     nn.Sequential(nn.Identity())))
    assert all(x.training for x in m.modules())
    x = pa.ones(3, 4)
    assert m.eval() is m and not any(x.training for x in m.modules())
    np.testing.assert_array_equal(m(x).numpy(), m[0](x).numpy())
    m.train()
    assert all(x.training for x in m.modules())
    assert np.any(m(x).numpy() != m[0](x).numpy())
    m[1].eval()
    assert m.training and not m[1][0].training
    with pytest.raises(ValueError, match="boolean"):
        m.train("no")


def test_zero_grad_to_none_and_in_place():
    m = nn.Linear(3, 2)
    m(pa.ones(4, 3)).sum().backward()
    g = m.weight.grad
    assert g is not None and np.any(g.numpy() != 0)
    m.zero_grad(set_to_none=False)
    assert m.weight.grad is g and not np.any(g.numpy()) and not np.any(m.bias.grad.numpy())
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None


def test_requires_grad_apply_hooks_submodule_lookup():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert m.requires_grad_(False) is m and not any(p.requires_grad for p in m.parameters())
    m.requires_grad_()
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Sequential"]
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1)
    x = pa.ones(1, 2)
    want = m[1](m[0](x * 2)).numpy() + 1
    np.testing.assert_array_equal(m(x).numpy(), want)
    h1.remove()
    h3 = m.register_forward_pre_hook(lambda mod, args: None)
    h1.remove()                                   # a stale handle removes nothing else
    assert list(m._forward_pre_hooks.values()) == [h3._hooks[h3._key]]
    h3.remove()
    h2.remove()
    np.testing.assert_array_equal(m(x).numpy(), m[1](m[0](x)).numpy())
    assert calls == [(1, 2)]
    assert m.get_submodule("0") is m[0] and m.get_parameter("0.bias") is m[0].bias
    with pytest.raises(AttributeError, match="no submodule"):
        m.get_submodule("0.x")


def test_to_float32_keeps_parameter_objects():
    m = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    before = list(m.parameters())
    m.float()
    assert [id(p) for p in m.parameters()] == [id(p) for p in before]
    assert all(p.dtype == np.float32 for p in m.parameters())
    assert m(pa.ones(1, 3, dtype=np.float32)).dtype == np.float32
    m.double()
    assert all(p.dtype == np.float64 for p in m.parameters())
    assert m.to("cpu") is m


# ---- state dicts -----------------------------------------------------------------------
def test_state_dict_is_detached_and_shares_memory():
    m = nn.Linear(3, 2)
    sd = m.state_dict()
    assert isinstance(sd, OrderedDict) and list(sd) == ["weight", "bias"]
    w = sd["weight"]
    assert type(w) is pa.Tensor and not w.requires_grad and w.numpy() is m.weight.numpy()
    with pa.no_grad():
        m.weight.mul_(2)
    np.testing.assert_array_equal(w.numpy(), m.weight.numpy())
    assert m.state_dict(keep_vars=True)["weight"] is m.weight


def test_state_dict_round_trip_through_save_and_load(tmp_path):
    manual_seed(1)
    a = build(nn)
    manual_seed(2)
    b = build(nn)
    x = pa.randn(5, 3)
    assert not np.array_equal(a(x).numpy(), b(x).numpy())
    path = tmp_path / "m.npz"
    pa.save(a.state_dict(), path)
    arrays = [p.numpy() for p in b.parameters()]
    result = b.load_state_dict(pa.load(path))
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert all(p.numpy() is arr for p, arr in zip(b.parameters(), arrays))  # written in place
    b.load_state_dict({k: v.numpy().astype(np.float32) for k, v in a.state_dict().items()})
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-6, atol=1e-6)


def snapshot(m):
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


def test_load_state_dict_wrong_shape_in_last_key_changes_nothing():
    manual_seed(3)
    m = build(nn)
    before = snapshot(m)
    manual_seed(4)
    new = snapshot(build(nn))
    last = list(new)[-1]
    new[last] = np.zeros((3, 3))
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(new)
    assert f"size mismatch for {last}" in str(e.value) and "nothing was changed" in str(e.value)
    for k, v in snapshot(m).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    with pytest.raises(RuntimeError, match="size mismatch"):  # even when not strict
        m.load_state_dict(new, strict=False)
    for k, v in snapshot(m).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_load_state_dict_names_every_problem():
    m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    before = snapshot(m)
    sd = snapshot(m)
    del sd["0.bias"], sd["1.weight"]
    sd["2.weight"] = np.zeros(1)
    sd["extra"] = np.zeros(1)
    sd["1.bias"] = np.array([1], dtype=np.int64)
    sd["0.weight"] = [[1.0, 2.0]] * 3
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert 'Missing key(s) in state_dict: "0.bias", "1.weight".' in msg
    assert 'Unexpected key(s) in state_dict: "2.weight", "extra".' in msg
    assert "dtype mismatch for 1.bias" in msg and "int64" in msg
    assert 'parameter named "0.weight"' in msg and "list" in msg
    for k, v in snapshot(m).items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(TypeError, match="dict-like"):
        m.load_state_dict([("0.weight", np.zeros((3, 2)))])


def test_load_state_dict_into_a_read_only_array_changes_nothing():
    m = nn.Sequential(nn.Linear(2, 2), nn.Embedding.from_pretrained(np.zeros((3, 2))))
    m[1].weight.numpy().flags.writeable = False
    before = snapshot(m)
    sd = {k: v + 1 for k, v in before.items()}
    with pytest.raises(RuntimeError, match="cannot load 1.weight: .* read-only"):
        m.load_state_dict(sd)
    for k, v in snapshot(m).items():
        np.testing.assert_array_equal(v, before[k])


def test_load_state_dict_not_strict_returns_the_keys_and_loads_the_rest():
    m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    sd = {"0.weight": np.full((3, 2), 0.5), "zz": np.ones(2)}
    bias = m[0].bias.numpy().copy()
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert missing == ["0.bias", "1.weight", "1.bias"] and unexpected == ["zz"]
    np.testing.assert_array_equal(m[0].weight.numpy(), 0.5)
    np.testing.assert_array_equal(m[0].bias.numpy(), bias)


def test_load_state_dict_bumps_versions_like_an_in_place_copy():
    m = nn.Linear(2, 2)
    y = (m(pa.ones(1, 2)) * m.weight.sum()).sum()
    m.load_state_dict(snapshot(m))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_buffers_are_loaded_and_converted():
    m = nn.Module()
    m.register_buffer("count", pa.tensor(np.array(3)))
    m.register_buffer("temp", pa.zeros(2), persistent=False)
    m.load_state_dict({"count": np.array([5])})  # 0-d target, 1-element source: PyTorch's
    assert m.count.item() == 5
    with pytest.raises(RuntimeError, match='Unexpected key.*"temp"'):
        m.load_state_dict({"count": np.array(1), "temp": np.zeros(2)})


# ---- pickling and copying --------------------------------------------------------------
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_keep_values_grads_and_sharing(how):
    m = build(nn)
    x = pa.randn(2, 3, seed=0)
    m(x).sum().backward()
    c = pickle.loads(pickle.dumps(m)) if how == "pickle" else copy.deepcopy(m)
    assert type(c).__name__ == "Net" and type(c.embed.weight) is nn.Parameter
    assert c.blocks[0] is c.shared is c.blocks[2]
    assert c.blocks[0].proj.weight is c.shared.proj.weight
    assert c.tied.weight is c.tail[1].weight
    assert names(c.named_parameters()) == names(m.named_parameters())
    for p, q in zip(m.parameters(), c.parameters()):
        assert p is not q and p.numpy() is not q.numpy()
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        np.testing.assert_array_equal(p.grad, q.grad)
    np.testing.assert_array_equal(c(x).numpy(), m(x).numpy())
    with pa.no_grad():
        c.shared.proj.weight.add_(1)
    np.testing.assert_array_equal(c.blocks[2].proj.weight.numpy(),    # still shared
                                  m.shared.proj.weight.numpy() + 1)   # original unchanged


def test_parameter_pickles_as_parameter():
    p = nn.Parameter(np.arange(3.0))
    p.grad = np.ones(3)
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        assert type(q) is nn.Parameter and q.requires_grad and q.is_leaf
        np.testing.assert_array_equal(q.numpy(), p.numpy())
        np.testing.assert_array_equal(q.grad, p.grad)


# ---- seeding ---------------------------------------------------------------------------
def test_manual_seed_makes_layers_and_randn_reproducible():
    manual_seed(0)
    a, xa = build(nn), pa.randn(4, 3)
    manual_seed(0)
    b, xb = build(nn), pa.randn(4, 3)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=n)
    np.testing.assert_array_equal(xa.numpy(), xb.numpy())
    manual_seed(1)
    assert not np.array_equal(nn.Linear(3, 4).weight.numpy(), a.embed.weight.numpy())


def test_manual_seed_stream_generator_argument_and_state():
    g = manual_seed(5)
    assert g is default_generator and pa.random.initial_seed() == 5
    np.testing.assert_array_equal(pa.randn(3).numpy(),
                                  np.random.default_rng(5).standard_normal(3))
    manual_seed(6)
    state = pa.random.get_rng_state()
    via_default = nn.Linear(3, 4)
    pa.random.set_rng_state(state)
    via_arg = nn.Linear(3, 4, generator=np.random.default_rng(6))
    np.testing.assert_array_equal(via_default.weight.numpy(), via_arg.weight.numpy())
    np.testing.assert_array_equal(via_default.bias.numpy(), via_arg.bias.numpy())
    pa.random.set_rng_state(state)
    nn.Linear(3, 4, generator=np.random.default_rng(99))  # leaves the default alone
    np.testing.assert_array_equal(nn.Linear(3, 4).weight.numpy(), via_default.weight.numpy())
    with pytest.raises(TypeError):
        nn.Linear(3, 4, generator=42)
    with pytest.raises(ValueError):
        manual_seed(-1)


def test_dropout_masks_follow_the_default_generator():
    d = nn.Dropout(0.5)
    x = pa.ones(100)
    manual_seed(7)
    a = d(x).numpy()
    b = d(x).numpy()
    manual_seed(7)
    np.testing.assert_array_equal(d(x).numpy(), a)
    assert not np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 2.0}


# ---- repr -----------------------------------------------------------------------------
def test_repr_snapshot():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
                                          nn.MaxPool2d(2))
            self.heads = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)] + [nn.Tanh()])
            self.drop = nn.Dropout(0.25)

    assert repr(Model()) == """Model(
  (features): Sequential(
    (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
    (1): ReLU()
    (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
  )
  (heads): ModuleList(
    (0-2): 3 x Linear(in_features=4, out_features=4, bias=True)
    (3): Tanh()
  )
  (drop): Dropout(p=0.25, inplace=False)
)"""
    assert repr(nn.Sequential()) == "Sequential()"
    assert repr(nn.ModuleList()) == "ModuleList()"


# ---- gradients and training ------------------------------------------------------------
def small_model(seed):
    manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.LayerNorm(5), nn.GELU(),
                         nn.Linear(5, 2))


def test_small_model_gradients_by_finite_differences():
    m = small_model(0)
    x = pa.randn(4, 3, seed=1, requires_grad=True)
    params = list(m.parameters())
    assert pa.gradcheck(lambda x_, *ps: m(x_), [x] + params)


def test_small_model_gradients_match_torch():
    torch = pytest.importorskip("torch")
    m = small_model(0)
    t = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.LayerNorm(5),
                            torch.nn.GELU(), torch.nn.Linear(5, 2)).double()
    t.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                       for k, v in m.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((4, 3))
    target = np.array([0, 1, 1, 0])
    loss = nn.CrossEntropyLoss()(m(pa.tensor(x)), target)
    loss.backward()
    tl = torch.nn.CrossEntropyLoss()(t(torch.from_numpy(x)), torch.from_numpy(target))
    tl.backward()
    np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-12)
    for (n, p), tp in zip(m.named_parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=n)


def test_forward_and_backward_from_several_threads():
    """A Module has no lock: forward and backward from several threads at once are
    fine (the gradients accumulate as sequentially, up to rounding order)."""
    from concurrent.futures import ThreadPoolExecutor

    m = small_model(0)
    xs = [pa.randn(6, 3, seed=i) for i in range(12)]
    for x in xs:
        pa.backward(m(x).sum())
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda x: pa.backward_parallel(m(x).sum()), xs))
    for (n, p), w in zip(m.named_parameters(), want):
        np.testing.assert_allclose(p.grad, w, rtol=1e-12, atol=1e-13, err_msg=n)


def train(model, backward, steps=5, lr=0.1):
    rng = np.random.default_rng(0)
    x = pa.tensor(rng.standard_normal((16, 1, 6, 6)))
    y = rng.integers(0, 3, 16)
    manual_seed(11)  # the dropout masks
    for _ in range(steps):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        backward(loss)
        with pa.no_grad():
            for p in model.parameters():
                p.sub_(lr * p.grad)
    return model


def cnn(seed):
    manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.2), nn.Linear(36, 8), nn.SiLU(),
                         nn.RMSNorm(8), nn.Linear(8, 3))


def test_training_with_backward_parallel_is_bitwise_the_same_as_backward():
    from conftest import assert_bitwise

    a = train(cnn(0), pa.backward)
    b = train(cnn(0), lambda loss: pa.backward_parallel(loss, num_workers=2))
    assert_bitwise([p.numpy() for p in a.parameters()], [p.numpy() for p in b.parameters()],
                   "parameter")
    assert not np.array_equal(a[0].weight.numpy(), cnn(0)[0].weight.numpy())  # it did train
