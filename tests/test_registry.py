"""Every declared op (`primitive.REGISTRY`), walked: nothing an op needs can be forgotten.

For each op: samples exist (tests/op_samples.py); each differentiable input has a formula;
gradcheck and gradgradcheck pass; the kernel (where one is declared) equals the formula at
first order; both engines give bitwise the same gradients; the Tensor method exists where
PyTorch's Tensor has one; docs/ops.md's op table lists it; and, with torch installed,
values, gradients and result dtypes equal PyTorch's.

Composites (`primitive.composite`) that have samples get the same checks on what they
return (a Tensor or a tuple of them, e.g. eigh's): gradcheck and gradgradcheck through
their differentiable outputs, kernel == formula on the nodes they record, engines bitwise,
the method, the docs line and PyTorch's values, gradients and dtypes.
"""
from __future__ import annotations

import importlib.util
import pathlib
import zlib

import numpy as np
import pytest
from op_samples import SAMPLES

import parallel_autograd as pa
from parallel_autograd.primitive import REGISTRY, Joint, defop

OPS = [op for op in REGISTRY if op.export and not op.composite]
IDS = [f"{op.module}.{op.name}" for op in OPS]
ROOT = pathlib.Path(__file__).resolve().parents[1]
# the registry walk (`-m "not walk"` leaves it out: CI runs it once, with the parity tests)
pytestmark = pytest.mark.walk


def _key(op) -> str:
    """The op's samples: `SAMPLES["<module>.<name>"]` where two ops share a name (torch.cross
    and torch.linalg.cross), else `SAMPLES[name]`."""
    qualified = f"{op.module}.{op.name}"
    return qualified if qualified in SAMPLES else op.name


def _samples(op):
    make = SAMPLES.get(_key(op))
    assert make is not None, (f"{op.name}: no samples in tests/op_samples.py (every declared "
                              f"op needs them: its gradient checks run on them)")
    return make(np.random.default_rng(zlib.crc32(op.name.encode())))


def _tensors(op, sample, dtype=np.float64):
    """The sample's arguments, arrays as Tensors (the op's differentiable inputs that
    are arrays require grad), and the indices of those that do."""
    n = len(sample.args) if op.composite else len(op.inputs)
    want = sample.grad
    if want is None:
        want = [i for i, a in enumerate(sample.args)
                if i < n and isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    args = [pa.tensor(a.astype(dtype) if a.dtype.kind == "f" else a, requires_grad=i in want)
            if isinstance(a, np.ndarray) else a for i, a in enumerate(sample.args)]
    return args, want


def _call(op, args, sample):
    return sample.call(op.fn, args)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_differentiable_input_has_a_formula(op):
    if op.formulas is None:
        return  # declared not differentiable (its result has no history)
    if isinstance(op.formulas, Joint):
        assert callable(op.formulas.fn)
        return
    assert len(op.formulas) == len(op.inputs)
    assert any(f is not None for f in op.formulas), f"{op.name}: no input has a formula"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_gradcheck_and_gradgradcheck(op):
    if op.formulas is None:
        pytest.skip("not differentiable")
    for sample in _samples(op):
        args, want = _tensors(op, sample)
        if not want:
            continue
        def fn(*a):
            return _call(op, a, sample)

        assert pa.gradcheck(fn, args), sample
        assert pa.gradgradcheck(fn, args), sample


@pytest.mark.parametrize("op", [op for op in OPS if op.has_kernel],
                         ids=[i for op, i in zip(OPS, IDS) if op.has_kernel])
def test_kernel_equals_formula_at_first_order(op):
    """A kernel is a faster statement of the same derivative: on every sample it gives
    what the formula gives (run on arrays, as the formula runs when there is no kernel)."""
    for sample in _samples(op):
        args, want = _tensors(op, sample)
        if not want:
            continue
        y = _call(op, args, sample)
        _check_kernel(y.grad_fn, op, f"{op.name} {sample}", y.shape)


def _check_kernel(node, op, where: str, shape: tuple) -> None:
    """`node`'s kernels (the op's) against the op's formulas run on the same arrays."""
    g = np.random.default_rng(1).uniform(0.5, 1.5, shape)  # (saved[0]: None if unread)
    params = node.kwargs or {}
    saved = node.saved
    n = len(node.next_nodes) if op.variadic else len(op.inputs)  # (cat: one per tensor)
    seen = saved if op.formula_extras else saved[:n + 1]  # (what the formulas get)
    if isinstance(op.formulas, Joint):
        kernel = node.joint(g, *saved, **params)
        formula = op.formulas.fn(g, *seen, **params)
        # (a kernel may skip the inputs that take no gradient: needs_input_grad)
        pairs = [kf for kf, nxt in zip(zip(kernel, formula), node.next_nodes)
                 if nxt is not None]
    else:
        pairs = [(node.vjps[i](g, *saved, **params),
                  op.formulas[i](g, *seen, **params))
                 for i in range(n) if node.vjps[i] is not None]
    for k, f in pairs:
        if k is None and f is None:
            continue
        f = f.numpy() if isinstance(f, pa.Tensor) else np.asarray(f)
        np.testing.assert_allclose(np.broadcast_to(k, np.shape(f)), f, rtol=1e-12,
                                   atol=1e-14, err_msg=where)


def _scaled_sum_joint(g, ans, x, y, w):
    return g * w, g * (1 - w)


# declared here, not exported: the registry's walk does not see it
@defop(inputs=("x", "y"), formula=Joint(_scaled_sum_joint),
       kernel=Joint(lambda g, ans, x, y, w: (g * w, g * (1 - w))), export=False)
def _mix(x, y, w):
    """x w + y (1 - w)."""
    return x * w + y * (1 - w)


def test_a_joint_kernel_is_the_nodes_rule():
    # the node runs the Joint's function (it got the Joint object itself: "not callable")
    x, y = pa.tensor([1.0, 2.0], requires_grad=True), pa.tensor([3.0, 4.0], requires_grad=True)
    gx, gy = pa.grad(_mix(x, y, 0.25).sum(), [x, y])
    np.testing.assert_allclose(gx, [0.25, 0.25])
    np.testing.assert_allclose(gy, [0.75, 0.75])
    (gg,) = pa.grad(pa.grad((_mix(x, y, 0.25) * x).sum(), [x], create_graph=True)[0].sum(),
                    [x])
    np.testing.assert_allclose(gg, [0.5, 0.5])


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_both_engines_agree_bitwise(op):
    if op.formulas is None:
        pytest.skip("not differentiable")
    eng = pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    try:
        for sample in _samples(op):
            args, want = _tensors(op, sample)
            if not want:
                continue
            leaves = [args[i] for i in want]
            y = _call(op, args, sample)
            w = np.random.default_rng(2).uniform(0.5, 1.5, y.shape)
            loss = (y * pa.tensor(w)).sum()
            seq = pa.grad(loss, leaves, retain_graph=True)
            par = eng.grad(loss, leaves)
            for a, b in zip(seq, par):
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (op.name, sample)
    finally:
        eng.close()


def _ops_table():
    spec = importlib.util.spec_from_file_location("ops_table", ROOT / "tools" / "ops_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_op_table_in_the_docs_is_current():
    tool = _ops_table()
    assert tool.current() == tool.table(), (
        "docs/ops.md's op table is stale: run `python tools/ops_table.py --write`")


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_op_has_a_line_in_the_docs_with_its_summary(op):
    line = [r for r in _ops_table().current().splitlines() if r.startswith(f"| `{op.name}`")]
    assert line, f"{op.name}: no line in docs/ops.md"
    assert (op.fn.__doc__ or "").strip(), f"{op.name}: no docstring"


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_method_exists_where_pytorch_has_one(op):
    torch = _torch()
    if op.module == "torch" and hasattr(torch.Tensor, op.torch_name):
        assert op.method is not None and hasattr(pa.Tensor, op.method), (
            f"{op.name}: torch.Tensor.{op.torch_name} exists, declare method=True")


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_values_gradients_and_dtypes_equal_pytorchs(op):
    torch = _torch()
    module = {"torch": torch, "torch.nn.functional": torch.nn.functional,
              "torch.linalg": torch.linalg, "torch.special": torch.special}[op.module]
    tfn = getattr(module, op.torch_name)
    for sample in _samples(op):
        args, want = _tensors(op, sample)
        targs = [torch.tensor(a.numpy(), requires_grad=a.requires_grad)
                 if isinstance(a, pa.Tensor) else a for a in args]
        y = _call(op, args, sample)
        ty = sample.call(tfn, targs)
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{op.name} {sample}")
        assert str(y.dtype) == str(ty.dtype).replace("torch.", ""), (op.name, sample)
        if not want or op.formulas is None:
            continue
        w = np.random.default_rng(3).uniform(0.5, 1.5, y.shape)
        gs = pa.grad(y, [args[i] for i in want], grad_outputs=w, allow_unused=True)
        tgs = torch.autograd.grad(ty, [targs[i] for i in want],
                                  grad_outputs=torch.tensor(w), allow_unused=True)
        for a, b in zip(gs, tgs):
            b = np.zeros_like(np.asarray(a)) if b is None else b.numpy()
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op.name} {sample}")


# ---- composites with samples: the same checks on what they return ----------------------------
COMPOSITES = [op for op in REGISTRY if op.export and op.composite and _key(op) in SAMPLES]
CIDS = [f"{op.module}.{op.name}" for op in COMPOSITES]


def _outputs(y) -> list:
    """A composite's result as a list (a Tensor, or a tuple's elements)."""
    return list(y) if isinstance(y, tuple) else [y]


def _differentiable(y) -> list:
    return [t for t in _outputs(y) if isinstance(t, pa.Tensor) and t.requires_grad]


def _recorded(outputs) -> dict:
    """Every node the outputs' graph holds (the composite's own and those of `post`), with
    its output's shape (a node need not keep its output: a consumer's input_meta says)."""
    todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
    shapes = {t.grad_fn: t.shape for t in outputs if t.grad_fn is not None}
    seen = set()
    while todo:
        node = todo.pop()
        if node in seen or node.variable is not None:
            continue
        seen.add(node)
        for n, meta in zip(node.next_nodes, node.input_meta):
            if n is not None:
                shapes.setdefault(n, meta[0])
                todo.append(n)
    return {n: shapes[n] for n in seen}


def _flat(y):
    """The differentiable outputs, flattened and joined (what gradcheck differentiates)."""
    return pa.concat([pa.reshape(t, (-1,)) for t in _differentiable(y)])


@pytest.mark.parametrize("op", COMPOSITES, ids=CIDS)
def test_composite_gradcheck_gradgradcheck_and_kernels(op):
    for sample in _samples(op):
        args, want = _tensors(op, sample)
        if not want or not _differentiable(_call(op, args, sample)):
            continue
        def fn(*a):
            return _flat(_call(op, a, sample))

        assert pa.gradcheck(fn, args), sample
        assert pa.gradgradcheck(fn, args), sample
        for node, shape in _recorded(_differentiable(_call(op, args, sample))).items():
            if node.op is not None and node.op.has_kernel:
                _check_kernel(node, node.op, f"{op.name} -> {node.name} {sample}", shape)


@pytest.mark.parametrize("op", COMPOSITES, ids=CIDS)
def test_composite_engines_agree_bitwise(op):
    eng = pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    try:
        for sample in _samples(op):
            args, want = _tensors(op, sample)
            outs = _differentiable(_call(op, args, sample)) if want else []
            if not outs:
                continue
            rng = np.random.default_rng(2)
            loss = sum((t * pa.tensor(rng.uniform(0.5, 1.5, t.shape))).sum() for t in outs)
            leaves = [args[i] for i in want]
            seq = pa.grad(loss, leaves, retain_graph=True, allow_unused=True)
            par = eng.grad(loss, leaves, allow_unused=True)
            for a, b in zip(seq, par):
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (op.name, sample)
    finally:
        eng.close()


@pytest.mark.parametrize("op", COMPOSITES, ids=CIDS)
def test_composite_method_and_docs_line(op):
    test_op_has_a_line_in_the_docs_with_its_summary(op)
    test_method_exists_where_pytorch_has_one(op)


@pytest.mark.parametrize("op", COMPOSITES, ids=CIDS)
def test_composite_values_gradients_and_dtypes_equal_pytorchs(op):
    torch = _torch()
    module = {"torch": torch, "torch.nn.functional": torch.nn.functional,
              "torch.linalg": torch.linalg, "torch.special": torch.special}[op.module]
    tfn = getattr(module, op.torch_name)
    for sample in _samples(op):
        args, want = _tensors(op, sample)
        targs = [torch.tensor(a.numpy(), requires_grad=a.requires_grad)
                 if isinstance(a, pa.Tensor) else a for a in args]
        ys, tys = _outputs(_call(op, args, sample)), _outputs(sample.call(tfn, targs))
        assert len(ys) == len(tys), (op.name, sample)
        for y, ty in zip(ys, tys):
            np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op.name} {sample}")
            assert str(y.dtype) == str(ty.dtype).replace("torch.", ""), (op.name, sample)
        pairs = [(y, ty) for y, ty in zip(ys, tys) if y.requires_grad]
        if not want or not pairs:
            continue
        rng = np.random.default_rng(3)
        ws = [rng.uniform(0.5, 1.5, y.shape) for y, _ in pairs]
        gs = pa.grad([y for y, _ in pairs], [args[i] for i in want], grad_outputs=ws,
                     allow_unused=True)
        tgs = torch.autograd.grad([ty for _, ty in pairs], [targs[i] for i in want],
                                  grad_outputs=[torch.tensor(w) for w in ws],
                                  allow_unused=True)
        for a, b in zip(gs, tgs):
            b = np.zeros_like(np.asarray(a)) if b is None else b.numpy()
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op.name} {sample}")
