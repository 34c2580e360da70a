"""pa.utils.data against torch.utils.data: batching, collation, samplers, errors, and the
threaded workers (same batches as without workers, prefetching, errors, timeouts, seeds)."""
import threading
import time

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset,
                                          IterableDataset, RandomSampler, SequentialSampler,
                                          StackDataset, Subset, SubsetRandomSampler,
                                          TensorDataset, WeightedRandomSampler,
                                          default_collate, get_worker_info, random_split)


def _ds(n=10):
    return TensorDataset(pa.tensor(np.arange(2.0 * n).reshape(n, 2)), pa.tensor(np.arange(n)))


def _ids(loader):
    return [b[1].numpy().tolist() for b in loader]


@pytest.mark.parametrize("kw", [dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                dict(batch_size=1), dict(batch_size=10), dict(batch_size=4)])
def test_sequential_batches_and_len_equal_torchs(kw):
    torch = pytest.importorskip("torch")
    tdl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.arange(20.0, dtype=torch.float64).reshape(10, 2), torch.arange(10)), **kw)
    dl = DataLoader(_ds(), **kw)
    assert _ids(dl) == [b[1].tolist() for b in tdl]
    assert len(dl) == len(tdl)
    for (x, _y), (tx, _ty) in zip(dl, tdl):
        np.testing.assert_array_equal(x.numpy(), tx.numpy())
        assert str(x.dtype) == str(tx.dtype).replace("torch.", "")


def test_default_collate_equals_torchs():
    torch = pytest.importorskip("torch")
    from collections import namedtuple
    P = namedtuple("P", "a b")
    cases = [
        [1, 2, 3], [1.5, 2.5], [True, False], ["a", "b"],
        [np.ones(3), np.zeros(3)], [np.float32(1), np.float32(2)],
        [{"x": 1.0, "y": [1, 2]}, {"x": 2.0, "y": [3, 4]}],
        [(1, 2.0), (3, 4.0)], [P(1, 2.0), P(3, 4.0)],
    ]
    for batch in cases:
        ours, theirs = default_collate(batch), torch.utils.data.default_collate(batch)
        _same(ours, theirs)


def _same(a, b):
    import torch
    if isinstance(b, torch.Tensor):
        assert isinstance(a, pa.Tensor)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert str(a.dtype) == str(b.dtype).replace("torch.", "")
    elif isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_collate_errors():
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate"):
        default_collate([object(), object()])


@pytest.mark.parametrize("kw, match", [
    (dict(batch_sampler=[[0]], batch_size=2), "mutually exclusive"),
    (dict(sampler=[0, 1], shuffle=True), "mutually exclusive with shuffle"),
    (dict(num_workers=-1), "non-negative"),
    (dict(prefetch_factor=2), "prefetch_factor"),
    (dict(persistent_workers=True), "num_workers > 0"),
    (dict(timeout=-1), "non-negative"),
    (dict(batch_size=None, drop_last=True), "mutually exclusive with drop_last"),
])
def test_bad_options_raise_torchs_errors(kw, match):
    torch = pytest.importorskip("torch")
    tds = torch.utils.data.TensorDataset(torch.arange(4))
    with pytest.raises(ValueError):
        torch.utils.data.DataLoader(tds, **kw)
    with pytest.raises(ValueError, match=match):
        DataLoader(_ds(4), **kw)


def test_shuffle_is_a_permutation_each_epoch_reproducible_from_the_seed():
    dl = DataLoader(_ds(), batch_size=4, shuffle=True)
    pa.manual_seed(3)
    a = [sum(_ids(dl), []) for _ in range(3)]
    pa.manual_seed(3)
    b = [sum(_ids(dl), []) for _ in range(3)]
    assert a == b and all(sorted(e) == list(range(10)) for e in a)
    assert a[0] != a[1]  # a new order each epoch
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    assert _ids(DataLoader(_ds(), batch_size=3, shuffle=True, generator=g1)) == \
        _ids(DataLoader(_ds(), batch_size=3, shuffle=True, generator=g2))


def test_samplers():
    ds = _ds()
    assert list(SequentialSampler(ds)) == list(range(10))
    r = list(RandomSampler(ds, generator=np.random.default_rng(0)))
    assert sorted(r) == list(range(10))
    r = list(RandomSampler(ds, num_samples=25, generator=np.random.default_rng(0)))
    assert len(r) == 25 and sorted(r[:10]) == list(range(10))
    r = list(RandomSampler(ds, replacement=True, num_samples=7))
    assert len(r) == 7 and all(0 <= i < 10 for i in r)
    assert sorted(SubsetRandomSampler([3, 5, 7])) == [3, 5, 7]
    w = list(WeightedRandomSampler([0, 0, 1.0, 0], 5))
    assert w == [2] * 5
    assert list(BatchSampler(range(5), 2, False)) == [[0, 1], [2, 3], [4]]
    assert len(BatchSampler(range(5), 2, True)) == 2
    with pytest.raises(ValueError):
        BatchSampler(range(5), 0, False)
    with pytest.raises(ValueError):
        RandomSampler(ds, num_samples=0)
    with pytest.raises(RuntimeError):
        WeightedRandomSampler([1.0, 1.0], 3, replacement=False)


def test_datasets_compose():
    a, b = _ds(4), _ds(3)
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 7 and c.cumulative_sizes == [4, 7]
    assert c[5][1].item() == 1 and c[-1][1].item() == 2
    s = Subset(a, [3, 0])
    assert len(s) == 2 and s[0][1].item() == 3
    st = StackDataset(a, a)
    assert len(st) == 4 and st[1][0][1].item() == 1
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(pa.zeros(3), pa.zeros(4))


def test_random_split_sizes_equal_torchs():
    torch = pytest.importorskip("torch")
    for lengths in ([0.7, 0.3], [0.33, 0.33, 0.34], [3, 7], [0.5, 0.5]):
        ours = random_split(_ds(), lengths, generator=np.random.default_rng(0))
        theirs = torch.utils.data.random_split(range(10), lengths)
        assert [len(s) for s in ours] == [len(s) for s in theirs]
        assert sorted(sum((list(s.indices) for s in ours), [])) == list(range(10))
    with pytest.raises(ValueError):
        random_split(_ds(), [3, 3])


class _Slow(Dataset):
    """Items that take a while to load, recording which thread loaded them."""

    def __init__(self, n=12, delay=0.01):
        self.n, self.delay, self.threads = n, delay, set()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        return np.full(2, float(i))


@pytest.mark.timeout(60)
def test_workers_give_the_same_batches_in_order_on_worker_threads():
    ds = _Slow()
    base = [b.numpy().tolist() for b in DataLoader(ds, batch_size=5)]
    ds.threads.clear()
    for in_order in (True, False):
        got = [b.numpy().tolist() for b in DataLoader(ds, batch_size=5, num_workers=3,
                                                   in_order=in_order)]
        assert (got == base) if in_order else sorted(got) == sorted(base)
    assert ds.threads and all(t.startswith("pa-dataloader") for t in ds.threads)


@pytest.mark.timeout(60)
def test_workers_prefetch_while_the_step_runs():
    ds = _Slow(n=8, delay=0.05)
    it = iter(DataLoader(ds, batch_size=1, num_workers=2, prefetch_factor=2))
    next(it)
    time.sleep(0.5)  # the "step": the workers keep loading meanwhile
    t0 = time.perf_counter()
    for _ in range(3):
        next(it)
    assert time.perf_counter() - t0 < 0.04 * 3 + 0.5  # loose: the three were loaded ahead
    list(it)


class _Failing(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 4:
            raise KeyError("bad item 4")
        return float(i)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_a_worker_reaches_the_caller(workers):
    with pytest.raises(KeyError, match="bad item 4"):
        list(DataLoader(_Failing(), batch_size=2, num_workers=workers))


@pytest.mark.timeout(60)
def test_timeout_raises_runtime_error():
    with pytest.raises(RuntimeError, match="timed out"):
        list(DataLoader(_Slow(n=2, delay=2.0), batch_size=1, num_workers=1, timeout=0.1))


class _Noisy(Dataset):
    """Augmentation that draws from the current generator (pa.randn)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return pa.randn(3).numpy() + i


@pytest.mark.timeout(60)
def test_workers_draw_reproducibly_from_their_own_generators():
    def run():
        pa.manual_seed(11)
        return [b.numpy() for b in DataLoader(_Noisy(), batch_size=2, num_workers=2)]

    a, b = run(), run()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    seen = []
    list(DataLoader(_Noisy(), batch_size=2, num_workers=2,
                    worker_init_fn=lambda wid: seen.append(
                        (wid, get_worker_info().num_workers))))
    assert sorted(seen) == [(0, 2), (1, 2)]


class _Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 10, step))


@pytest.mark.timeout(60)
def test_iterable_dataset_batches_round_robin_as_torchs():
    torch = pytest.importorskip("torch")

    class TStream(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            start, step = (0, 1) if info is None else (info.id, info.num_workers)
            return iter(range(start, 10, step))

    for kw in (dict(batch_size=2), dict(batch_size=2, num_workers=2),
               dict(batch_size=3, drop_last=True), dict(batch_size=None)):
        theirs = [b.tolist() if isinstance(b, torch.Tensor) else b
                  for b in torch.utils.data.DataLoader(TStream(), **kw)]
        ours = [b.numpy().tolist() if isinstance(b, pa.Tensor) else b
                for b in DataLoader(_Stream(), **kw)]
        assert ours == theirs, kw


@pytest.mark.timeout(60)
def test_persistent_workers_keep_their_threads_across_epochs():
    ds = _Slow(n=4, delay=0.0)
    dl = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
    list(dl)
    pool = dl._workers
    list(dl)
    assert dl._workers is pool
