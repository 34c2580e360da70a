"""matmul: every operand rank combination numpy allows, batch broadcasting on both
sides, operators with arrays, float32, and mismatch errors."""
import numpy as np
import pytest

import parallel_autograd as pa


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(a):
    return pa.tensor(a, requires_grad=True)


SHAPES = [
    ((3,), (3,)),            # dot product -> 0-d
    ((3,), (3, 4)),          # vector @ matrix
    ((2, 3), (3,)),          # matrix @ vector
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),     # batched @ shared
    ((2, 3), (5, 3, 4)),     # shared @ batched
    ((2, 1, 2, 3), (4, 3, 2)),  # batch dims broadcast on both sides
    ((3,), (2, 3, 4)),       # vector @ batch
    ((2, 4, 3), (3,)),       # batch @ vector
    ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_values_and_gradcheck(shapes):
    a, b = rand(shapes[0], 1), rand(shapes[1], 2)
    out = pa.matmul(leaf(a), leaf(b))
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-13)
    assert pa.gradcheck(pa.matmul, [leaf(a), leaf(b)])
    assert pa.gradcheck(lambda x, y: x @ y, [leaf(a), leaf(b)])


def test_matmul_with_numpy_arrays_on_either_side():
    a, w = rand((2, 3), 3), rand((3, 4), 4)
    t = leaf(a)
    out = t @ w
    np.testing.assert_allclose(out.numpy(), a @ w)
    out.sum().backward()
    np.testing.assert_allclose(t.grad, np.ones((2, 4)) @ w.T)
    u = leaf(w)
    out = a @ u          # ndarray @ Tensor uses Tensor.__rmatmul__
    assert isinstance(out, pa.Tensor)
    out.sum().backward()
    np.testing.assert_allclose(u.grad, a.T @ np.ones((2, 4)))


def test_matmul_method_and_only_one_side_requires_grad():
    a, b = leaf(rand((2, 3), 5)), pa.tensor(rand((3, 2), 6))
    (g,) = pa.grad(a.matmul(b).sum(), [a])
    np.testing.assert_allclose(g, np.ones((2, 2)) @ b.numpy().T)


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_float32(shapes):
    a, b = rand(shapes[0], 7), rand(shapes[1], 8)
    a32 = pa.tensor(a.astype(np.float32), requires_grad=True)
    b32 = pa.tensor(b.astype(np.float32), requires_grad=True)
    y = pa.matmul(a32, b32)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    ga, gb = pa.grad(y, [a32, b32], grad_outputs=np.ones(y.shape, np.float32))
    assert ga.dtype == gb.dtype == np.float32
    a64, b64 = leaf(a), leaf(b)
    ga64, gb64 = pa.grad(pa.matmul(a64, b64), [a64, b64], grad_outputs=np.ones(y.shape))
    np.testing.assert_allclose(ga, ga64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, gb64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 2, 3), (3, 3, 4)),
                                    ((), (3,))])
def test_matmul_mismatch_raises_where_numpy_does_with_both_shapes(shapes):
    # numpy raises for the same shapes; we raise PyTorch's type (RuntimeError) with a
    # message naming both shapes once (numpy's gufunc text, "matmul: matmul: ... core
    # dimension 0", named neither): tests/test_bad_input.py checks what it says.
    a, b = np.ones(shapes[0]), np.ones(shapes[1])
    with pytest.raises(ValueError):
        np.matmul(a, b)
    with pytest.raises(RuntimeError) as info:
        pa.matmul(leaf(a), leaf(b))
    assert str(info.value).startswith(f"matmul: shapes {shapes[0]} and {shapes[1]} cannot")


# ---- PyTorch's products: dtypes, signatures, gradients of ignored inputs -----------------
def test_matmul_refuses_mixed_dtypes_as_pytorch():
    # numpy promoted float32 @ float64 to float64 silently; PyTorch raises (RuntimeError)
    a32 = pa.tensor(rand((2, 3)).astype(np.float32), requires_grad=True)
    b64 = pa.tensor(rand((3, 2)))
    for call in (lambda: a32 @ b64, lambda: pa.matmul(b64.T, a32.T), lambda: pa.mm(a32, b64),
                 lambda: pa.bmm(a32[None], b64[None]), lambda: pa.mv(a32, b64[:, 0]),
                 lambda: pa.addmm(b64[:, :2] @ b64[:2], a32, a32.T.float())):
        with pytest.raises(RuntimeError, match="same dtype"):
            call()
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.tensor(rand((2, 3)), dtype=torch.float32) @ torch.tensor(rand((3, 2)))


def test_addmm_with_beta_zero_gives_input_a_zero_gradient():
    # PyTorch: input is ignored (its NaNs do not propagate) but its gradient is 0, not None
    c = pa.tensor(np.full((2, 4), np.nan), requires_grad=True)
    a, b = leaf(rand((2, 3))), leaf(rand((3, 4)))
    y = pa.addmm(c, a, b, beta=0)
    assert not np.isnan(y.numpy()).any()
    y.sum().backward()
    assert c.grad is not None and np.array_equal(c.grad, np.zeros((2, 4)))


def _torch_parameters(doc: str) -> list:
    """[(name, keyword_only)] from the first line of a torch docstring, `out` left out."""
    line = doc.strip().split("\n")[0]
    start = line.index("(") + 1
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(line[end], 0)
        end += 1
    parts, depth, word = [], 0, ""
    for ch in line[start:end - 1] + ",":
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and not depth:
            parts.append(word.strip())
            word = ""
        else:
            word += ch
    out, kw = [], False
    for part in parts:
        if part == "*":
            kw = True
        elif part and not part.startswith("out"):
            out.append((part.split("=")[0].strip(), kw))
    return out


def test_signatures_are_pytorchs():
    torch = pytest.importorskip("torch")
    import inspect

    from parallel_autograd.primitive import REGISTRY
    checked = 0
    for op in REGISTRY:
        if not op.export or op.family != "linalg":
            continue
        module = torch.linalg if op.module == "torch.linalg" else torch
        want = _torch_parameters(getattr(module, op.torch_name).__doc__)
        got = [(p.name, p.kind is p.KEYWORD_ONLY)
               for p in inspect.signature(op.fn).parameters.values()]
        assert got == want, (op.module, op.name)
        checked += 1
    assert checked >= 34
