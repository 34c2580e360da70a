"""pa.amp / pa.cuda.amp against torch's on a machine without CUDA: GradScaler and autocast
pass everything through when disabled or asked for "cuda" (with PyTorch's warnings), and
refuse to pretend mixed precision on "cpu" (NotImplementedError)."""
import warnings

import numpy as np
import pytest

import parallel_autograd as pa


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = fn()
    return result, [(type(x.message), str(x.message)) for x in w
                    if issubclass(x.category, (UserWarning, FutureWarning))]


@pytest.mark.parametrize("make", [
    lambda lib: lib.amp.GradScaler("cuda"),
    lambda lib: lib.amp.GradScaler("cuda", enabled=False),
    lambda lib: lib.amp.GradScaler("cpu", enabled=False),
    lambda lib: lib.amp.GradScaler(),
    lambda lib: lib.cuda.amp.GradScaler(enabled=False),
    lambda lib: lib.cuda.amp.GradScaler(init_scale=8.0),
])
def test_grad_scaler_passes_through_as_pytorchs_does_without_cuda(make):
    torch = pytest.importorskip("torch")
    ours, our_warnings = _caught(lambda: make(pa))
    theirs, their_warnings = _caught(lambda: make(torch))
    assert our_warnings == their_warnings
    assert ours.is_enabled() is theirs.is_enabled() is False
    assert ours.get_scale() == theirs.get_scale() == 1.0
    assert ours.state_dict() == theirs.state_dict() == {}
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    opt = pa.optim.SGD([x], lr=0.5)
    loss = (x * x).sum()
    assert ours.scale(loss) is loss
    ours.scale(loss).backward()
    ours.unscale_(opt)
    assert ours.step(opt) is None
    ours.update()
    np.testing.assert_array_equal(x.detach().numpy(), [0.0, 0.0])  # x - 0.5 * 2x


def test_autocast_for_cuda_warns_and_changes_nothing():
    torch = pytest.importorskip("torch")
    for lib in (pa, torch):
        ctx, got = _caught(lambda lib=lib: lib.autocast(device_type="cuda",
                                                        dtype=lib.float16))
        assert got == [(UserWarning, "CUDA is not available or torch_xla is imported. "
                                     "Disabling autocast.")]
        with ctx:
            assert (lib.ones(2, 2, dtype=lib.float32) @ lib.ones(2, 2, dtype=lib.float32)
                    ).dtype == lib.float32
    with pa.amp.autocast("cpu", enabled=False):
        pass

    @pa.amp.autocast("cpu", enabled=False)
    def f(a):
        return a * 2
    assert f(pa.ones(1)).tolist() == [2.0]


def test_mixed_precision_on_the_cpu_is_refused_not_faked():
    with pytest.raises(NotImplementedError, match="enabled=False"):
        pa.amp.GradScaler("cpu")
    with pytest.raises(NotImplementedError, match="mixed precision"):
        pa.autocast(device_type="cpu", dtype=pa.bfloat16)
    with pytest.raises(ValueError, match="device_type"):
        pa.autocast(pa.device("cpu"))
