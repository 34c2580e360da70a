"""`pa.Tensor(...)` against `torch.Tensor(...)` (issue 27): sizes give a tensor of that
shape in the default dtype (zeros here, uninitialised in PyTorch), a lone float or bool
is refused, data is copied into the default dtype; `pa.tensor(3)` stays 0-d. The one
deliberate difference: an ndarray keeps its dtype (README's table)."""
import numpy as np
import pytest

import parallel_autograd as pa

torch = pytest.importorskip("torch")

SIZES = [(3,), (2, 3), (), (0,), (np.int64(2),), (1, 0, 2)]


@pytest.mark.parametrize("args", SIZES, ids=[str(a) for a in SIZES])
def test_sizes_make_a_tensor_of_that_shape_like_torch(args):
    t = torch.Tensor(*args)
    ours = pa.Tensor(*args)
    assert tuple(ours.shape) == tuple(t.shape)
    assert ours.dtype == pa.get_default_dtype()  # torch's: its default dtype (float32)
    assert not ours.numpy().any()


def test_a_size_object_is_sizes_and_the_default_dtype_is_followed():
    assert pa.Tensor(pa.Size([2, 3])).shape == torch.Tensor(torch.Size([2, 3])).shape
    before = pa.get_default_dtype()
    pa.set_default_dtype(pa.float64)
    try:
        assert pa.Tensor(2).dtype == pa.float64
    finally:
        pa.set_default_dtype(before)
    x = pa.Tensor(2, 2, requires_grad=True)
    assert x.requires_grad and x.is_leaf


@pytest.mark.parametrize("value", [3.0, True, 1j])
def test_a_lone_float_or_bool_is_refused_like_torch(value):
    with pytest.raises(TypeError):
        torch.Tensor(value)
    with pytest.raises(TypeError, match="must be a sequence"):
        pa.Tensor(value)


def test_negative_sizes_and_mixed_arguments():
    with pytest.raises(RuntimeError):
        torch.Tensor(-1)
    with pytest.raises(RuntimeError, match="negative dimension"):
        pa.Tensor(-1)
    with pytest.raises(TypeError):
        torch.Tensor(2, [3])
    with pytest.raises(TypeError):
        pa.Tensor(2, [3])


def test_data_and_pa_tensor():
    assert pa.Tensor([1, 2]).dtype == pa.get_default_dtype()
    assert pa.tensor(3).shape == () and pa.tensor(3).item() == 3
    assert pa.tensor(2.5, requires_grad=True).requires_grad
    # the deliberate difference: an ndarray keeps its dtype (torch: float32)
    assert pa.Tensor(np.array([1, 2])).dtype == pa.int64
    assert torch.Tensor(np.array([1, 2])).dtype == torch.float32
