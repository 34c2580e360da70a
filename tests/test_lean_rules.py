"""Allocation-lean rules and forwards (ops/pointwise.py, ops/activations.py, ops/reduce.py).

On arrays of 10^6 float64 elements, each rule, called as the engine calls it
(`vjp(g, *node.saved, **node.kwargs)`), allocates at most the array it returns plus a
small slack (tests/conftest.py's `temporary_bytes`), and its values are those of the
plain numpy formula (which allocates a temporary per operation). The large size also
runs the chunked path of `_fused` (chunks of 32768 elements, broadcast operands
buffered per chunk). Gradients against finite differences and PyTorch are checked on
small inputs in test_ops_elementwise.py, test_ops_reduce.py and test_torch_parity.py.
"""
import math

import numpy as np
import pytest
from conftest import temporary_bytes

import parallel_autograd as pa
from parallel_autograd.ops import special

SHAPE = (1000, 1000)
NBYTES = 8 * 1000 * 1000
SLACK = 0.1 * NBYTES            # a tenth of one operand: no full-size temporary fits
SPECIAL_SCRATCH = 4.5 * 2**20    # special.ndtr's chunk scratch, whatever the size


def data(kind, seed):
    rng = np.random.default_rng(seed)
    if kind == "pos":
        return rng.uniform(0.5, 2.0, SHAPE)
    if kind == "ties":            # maximum/minimum with many exact ties
        return np.round(rng.standard_normal(SHAPE), 1)
    return rng.standard_normal(SHAPE)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gelu_tanh_grad(g, x):
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x ** 2))


# name -> (op, input kinds, reference input gradients (g, *inputs) -> list)
UNARY = {
    "neg": (pa.neg, lambda g, x: [-g]),
    "abs": (pa.abs, lambda g, x: [g * np.sign(x)]),
    "exp": (pa.exp, lambda g, x: [g * np.exp(x)]),
    "sin": (pa.sin, lambda g, x: [g * np.cos(x)]),
    "cos": (pa.cos, lambda g, x: [-g * np.sin(x)]),
    "tanh": (pa.tanh, lambda g, x: [g * (1 - np.tanh(x) ** 2)]),
    "sigmoid": (pa.sigmoid, lambda g, x: [g * _sig(x) * (1 - _sig(x))]),
    "relu": (pa.relu, lambda g, x: [g * (x > 0)]),
    "leaky_relu": (lambda x: pa.leaky_relu(x, 0.2), lambda g, x: [g * np.where(x > 0, 1, 0.2)]),
    "leaky_relu_neg": (lambda x: pa.leaky_relu(x, -0.5),
                       lambda g, x: [g * np.where(x > 0, 1, -0.5)]),
    "leaky_relu_steep": (lambda x: pa.leaky_relu(x, 3.0),
                         lambda g, x: [g * np.where(x > 0, 1, 3.0)]),
    "gelu": (pa.gelu, lambda g, x: [g * (special.ndtr(x) + x * np.exp(-x * x / 2)
                                         / math.sqrt(2 * math.pi))]),
    "gelu_tanh": (lambda x: pa.gelu(x, approximate="tanh"),
                  lambda g, x: [_gelu_tanh_grad(g, x)]),
    "silu": (pa.silu, lambda g, x: [g * _sig(x) * (1 + x * (1 - _sig(x)))]),
    "clip": (lambda x: pa.clip(x, -0.5, 0.7), lambda g, x: [g * ((x >= -0.5) & (x <= 0.7))]),
    "pow0": (lambda x: x ** 0, lambda g, x: [g * 0.0]),
    "pow1": (lambda x: x ** 1, lambda g, x: [g * 1.0]),
    "pow2": (lambda x: x ** 2, lambda g, x: [g * 2 * x]),
    "pow3": (lambda x: x ** 3, lambda g, x: [g * 3 * x ** 2]),
}
POSITIVE = {
    "log": (pa.log, lambda g, x: [g / x]),
    "sqrt": (pa.sqrt, lambda g, x: [g / (2 * np.sqrt(x))]),
    "pow0.5": (lambda x: x ** 0.5, lambda g, x: [g * 0.5 * x ** -0.5]),
    "pow-1": (lambda x: x ** -1, lambda g, x: [-g / (x * x)]),
    "pow1.7": (lambda x: x ** 1.7, lambda g, x: [g * 1.7 * x ** 0.7]),
}
BINARY = {
    "add": (pa.add, ("n", "n"), lambda g, x, y: [g, g]),
    "sub": (pa.sub, ("n", "n"), lambda g, x, y: [g, -g]),
    "mul": (pa.mul, ("n", "n"), lambda g, x, y: [g * y, g * x]),
    "div": (pa.div, ("n", "pos"), lambda g, x, y: [g / y, -g * x / y ** 2]),
    "maximum": (pa.maximum, ("ties", "ties"),
                lambda g, x, y: [g * ((x > y) + 0.5 * (x == y)), g * ((y > x) + 0.5 * (x == y))]),
    "minimum": (pa.minimum, ("ties", "ties"),
                lambda g, x, y: [g * ((x < y) + 0.5 * (x == y)), g * ((y < x) + 0.5 * (x == y))]),
    "pow": (pa.pow, ("pos", "n"),
            lambda g, x, y: [g * y * x ** (y - 1), g * x ** y * np.log(x)]),
    "where": (lambda x, y: pa.where(WHERE_MASK, x, y), ("n", "n"),
              lambda g, x, y: [np.where(WHERE_MASK, g, 0), np.where(WHERE_MASK, 0, g)]),
}
WHERE_MASK = data("n", 99) > 0

REDUCE = {
    "sum": (lambda x: pa.sum(x, axis=1), lambda g, x: [np.broadcast_to(g[:, None], x.shape)]),
    "mean": (lambda x: pa.mean(x), lambda g, x: [np.broadcast_to(g / x.size, x.shape)]),
    "max": (lambda x: pa.amax(x, axis=1), None),
    "min": (lambda x: pa.amin(x, axis=0, keepdims=True), None),
    "max_all": (lambda x: pa.max(x), None),
    "var": (lambda x: pa.var(x, axis=1),
            lambda g, x: [g[:, None] * (x - x.mean(1, keepdims=True)) * 2 / (x.shape[1] - 1)]),
    "logsumexp": (lambda x: pa.logsumexp(x, axis=0),
                  lambda g, x: [g * np.exp(x - np.log(np.exp(x).sum(0)))]),
    "softmax": (lambda x: pa.softmax(x, axis=-1), None),
    "log_softmax": (lambda x: pa.log_softmax(x, axis=0), None),
}


def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _reduce_ref(name, g, x):
    if name in ("max", "min", "max_all"):
        axis = {"max": 1, "min": 0, "max_all": None}[name]
        a = getattr(x, name[:3])(axis=axis, keepdims=True)
        m = x == a
        gg = g[:, None] if name == "max" else g
        return [gg * m / m.sum(axis=axis, keepdims=True)]
    if name == "softmax":
        s = _softmax_ref(x, -1)
        return [s * (g - (g * s).sum(-1, keepdims=True))]
    if name == "log_softmax":
        return [g - _softmax_ref(x, 0) * g.sum(0, keepdims=True)]
    return REDUCE[name][1](g, x)


def run_rules(out, g):
    """Each input's rule as the engine calls it: (gradient, extra bytes) per input."""
    node = out.grad_fn
    kwargs = node.kwargs or {}
    return [temporary_bytes(v, g, *node.saved, **kwargs) for v in node.vjps if v is not None]


def check(op, arrays, ref, g=None, tol=1e-12):
    leaves = [pa.tensor(a, requires_grad=True) for a in arrays]
    out = op(*leaves)
    if g is None:
        g = np.random.default_rng(7).uniform(0.5, 1.5, out.shape)
    results = run_rules(out, g)
    for (grad, extra), want in zip(results, ref(g, *arrays)):
        assert extra < SLACK, f"rule allocated {extra} bytes beyond its result"
        np.testing.assert_allclose(grad, np.broadcast_to(want, np.shape(grad)), rtol=tol,
                                   atol=tol)
    return leaves


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE))
def test_unary_rule_allocates_only_its_result(name):
    op, ref = UNARY.get(name) or POSITIVE[name]
    check(op, [data("pos" if name in POSITIVE else "n", 1)], ref)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_rules_allocate_only_their_results(name):
    op, kinds, ref = BINARY[name]
    check(op, [data(k, i + 2) for i, k in enumerate(kinds)], ref)


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce_rules_allocate_only_their_results(name):
    op, _ = REDUCE[name]
    x = data("ties" if name in ("max", "min", "max_all") else "n", 3)
    check(op, [x], lambda g, x: _reduce_ref(name, g, x))


@pytest.mark.parametrize("name", ["silu", "gelu_tanh", "tanh", "gelu", "leaky_relu_neg"])
def test_rules_take_a_broadcast_gradient(name):
    # a sum's rule hands on a broadcast view (all strides 0): chunks buffer it
    op, ref = UNARY[name]
    g = np.broadcast_to(np.float64(1.25), SHAPE)
    check(op, [data("n", 4)], ref, g=g)


def test_maximum_rule_with_scalar_and_broadcast_operands():
    x = data("ties", 5)
    row = np.round(np.random.default_rng(6).standard_normal(SHAPE[1]), 1)
    check(lambda a: pa.maximum(a, 0.0), [x], lambda g, x: [g * ((x > 0) + 0.5 * (x == 0))])
    check(lambda a, b: pa.minimum(a, b), [x, row],
          lambda g, x, y: [g * ((x < y) + 0.5 * (x == y)), g * ((y < x) + 0.5 * (x == y))])


FORWARDS = {name: op for name, (op, _) in {**UNARY, **POSITIVE}.items() if name != "gelu"}
FORWARDS.update({name: op for name, (op, _) in REDUCE.items()
                 if name not in ("logsumexp", "var")})   # these keep one temporary


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_forward_allocates_only_its_result(name):
    x = pa.tensor(data("pos" if name in POSITIVE else "n", 8), requires_grad=True)
    _, extra = temporary_bytes(FORWARDS[name], x)
    assert extra < SLACK


def test_gelu_forward_saves_the_cdf_and_otherwise_reuses_it():
    x = pa.tensor(data("n", 9), requires_grad=True)
    y, extra = temporary_bytes(pa.gelu, x)
    assert extra < NBYTES + SPECIAL_SCRATCH           # the saved CDF, nothing else
    cdf = special.ndtr(x.numpy(), fast=True)          # exact GELU's
    np.testing.assert_array_equal(y.grad_fn.saved[2], cdf)  # (y, x, cdf)
    with pa.no_grad():
        z, extra = temporary_bytes(pa.gelu, x)
    assert extra < SPECIAL_SCRATCH                    # the output is the CDF's buffer
    np.testing.assert_array_equal(z.numpy(), y.numpy())


def test_rules_never_write_into_their_arguments():
    for name, (op, _) in {**UNARY, **POSITIVE}.items():
        x = data("pos" if name in POSITIVE else "n", 10)[:50]
        out = op(pa.tensor(x, requires_grad=True))
        g = np.random.default_rng(11).uniform(0.5, 1.5, out.shape)
        before = [np.copy(a) for a in (g, *out.grad_fn.saved) if isinstance(a, np.ndarray)]
        run_rules(out, g)
        after = [a for a in (g, *out.grad_fn.saved) if isinstance(a, np.ndarray)]
        for b, a in zip(before, after):
            np.testing.assert_array_equal(a, b, err_msg=name)
