"""Property tests over random graphs, with shrinking: Hypothesis draws a small graph
(leaves, ops reading earlier values, heavy reuse, several roots), and every engine
set-up must give the sequential engine's gradients byte for byte. A failure shrinks
to a minimal graph and is remembered (Hypothesis's example database) for the next run.
The long-running harness (`python -m stress`) keeps its own seeded generator."""
from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import parallel_autograd as pa  # noqa: E402
from conftest import assert_bitwise  # noqa: E402

_UNARY = ("tanh", "sin", "exp_small", "scale", "sum_broadcast")
_BINARY = ("add", "mul", "sub", "maximum")


@st.composite
def graphs(draw):
    """A recipe: leaf count, ops as (name, argument indices), and the roots."""
    n_leaves = draw(st.integers(1, 4))
    n_ops = draw(st.integers(1, 14))
    ops = []
    for k in range(n_ops):
        n_values = n_leaves + k
        if draw(st.booleans()):
            ops.append((draw(st.sampled_from(_UNARY)), (draw(st.integers(0, n_values - 1)),)))
        else:
            ops.append((draw(st.sampled_from(_BINARY)),
                        (draw(st.integers(0, n_values - 1)),
                         draw(st.integers(0, n_values - 1)))))
    n_values = n_leaves + n_ops
    roots = draw(st.lists(st.integers(0, n_values - 1), min_size=1, max_size=3))
    seed = draw(st.integers(0, 2**16))
    return n_leaves, ops, roots, seed


def build(recipe):
    n_leaves, ops, roots, seed = recipe
    rng = np.random.default_rng(seed)
    leaves = [pa.tensor(rng.standard_normal(5), requires_grad=True) for _ in range(n_leaves)]
    values = list(leaves)
    for name, args in ops:
        xs = [values[i] for i in args]
        if name == "tanh":
            v = pa.tanh(xs[0])
        elif name == "sin":
            v = pa.sin(xs[0])
        elif name == "exp_small":
            v = pa.exp(xs[0] * 0.1)
        elif name == "scale":
            v = xs[0] * 0.7
        elif name == "sum_broadcast":  # a reduction broadcast back: fan-in of a scalar
            v = xs[0] + xs[0].sum()
        elif name == "add":
            v = xs[0] + xs[1]
        elif name == "mul":
            v = xs[0] * xs[1]
        elif name == "sub":
            v = xs[0] - xs[1]
        else:
            v = pa.maximum(xs[0], xs[1])
        values.append(v)
    outs = [values[i].sum() if values[i].requires_grad else None for i in roots]
    outs = [o for o in outs if o is not None]
    return outs, leaves


_ENGINES = {
    "queued": dict(min_nodes=0, min_work=0, min_width=0, inline_below=0),
    "inline": dict(min_nodes=0, min_work=0, min_width=0, inline_below=16),
    "shared": dict(min_nodes=0, min_work=0, min_width=0, share_cheap=True),
}


@pytest.fixture(scope="module")
def engines():
    made = {(name, w): pa.Engine(w, **kw) for name, kw in _ENGINES.items() for w in (2, 3)}
    yield made
    for eng in made.values():
        eng.close()


_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(graphs())
def test_every_engine_gives_the_sequential_gradients(engines, recipe):
    outs, leaves = build(recipe)
    if not outs:
        return
    pa.backward(_total(outs))
    reference = [t.grad for t in leaves]
    for eng in engines.values():
        eng_outs, eng_leaves = build(recipe)
        eng.backward(_total(eng_outs))
        assert_bitwise(reference, [t.grad for t in eng_leaves])


@_SETTINGS
@given(graphs(), st.data())
def test_grad_matches_sequential_for_any_subset_of_inputs(engines, recipe, data):
    outs, leaves = build(recipe)
    if not outs:
        return
    chosen = data.draw(st.lists(st.sampled_from(range(len(leaves))), min_size=1,
                                max_size=len(leaves), unique=True))
    reference = pa.grad(outs, [leaves[i] for i in chosen], allow_unused=True)
    for eng in engines.values():
        eng_outs, eng_leaves = build(recipe)
        got = eng.grad(eng_outs, [eng_leaves[i] for i in chosen], allow_unused=True)
        assert_bitwise(reference, got)


def _total(outs):
    total = outs[0]
    for o in outs[1:]:
        total = total + o
    return total
