"""Ops that keep integer inputs integer, as PyTorch's (issue 27): hardtanh/relu6 (limits
truncated), average pools (integer sums, division truncated toward zero), l1_loss
without reduction, addcmul (a float value truncated). The conformance walk checks the
dtypes on small integers; here the truncations, against torch."""
import numpy as np
import pytest

import parallel_autograd as pa
import parallel_autograd.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
X = np.random.default_rng(0).integers(-9, 10, (2, 3, 5, 6, 7))


def _same(ours, theirs):
    assert ours.dtype == pa.int64 and theirs.dtype == torch.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


POOLS = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
         dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
         dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
         dict(kernel_size=2, divisor_override=3), dict(kernel_size=2, divisor_override=-4)]


@pytest.mark.parametrize("kw", POOLS, ids=[str(k) for k in POOLS])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_average_pools_of_integers_truncate_like_torch(kw, nd):
    if nd == 1 and "divisor_override" in kw:
        pytest.skip("avg_pool1d has no divisor_override")
    x = X[(...,) + (0,) * (3 - nd)]
    ours = getattr(F, f"avg_pool{nd}d")(pa.tensor(x), **kw)
    _same(ours, getattr(TF, f"avg_pool{nd}d")(torch.tensor(x), **kw))


@pytest.mark.parametrize("limits", [(-1.0, 1.0), (-0.5, 2.5), (-2.7, -1.2)])
def test_hardtanh_of_integers_truncates_its_limits_like_torch(limits):
    x = np.arange(-4, 5)
    _same(F.hardtanh(pa.tensor(x), *limits), TF.hardtanh(torch.tensor(x), *limits))
    _same(F.relu6(pa.tensor(x * 3)), TF.relu6(torch.tensor(x * 3)))
    with pytest.raises(RuntimeError, match="unsigned"):
        F.hardtanh(pa.tensor(x.astype(np.uint8) + 4), -1.0, 1.0)


@pytest.mark.parametrize("value", [1, 2, 2.7, -0.5])
def test_addcmul_and_l1_loss_of_integers_like_torch(value):
    a, b, c = X[0, 0, 0], X[0, 1, 0], X[1, 0, 0]
    _same(pa.addcmul(pa.tensor(a), pa.tensor(b), pa.tensor(c), value=value),
          torch.addcmul(torch.tensor(a), torch.tensor(b), torch.tensor(c), value=value))
    _same(F.l1_loss(pa.tensor(a), pa.tensor(b), reduction="none"),
          TF.l1_loss(torch.tensor(a), torch.tensor(b), reduction="none"))
