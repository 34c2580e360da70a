"""`DataLoader`, as `torch.utils.data.DataLoader`: batches from a dataset, in the order of a
sampler, collated into tensors; with `num_workers > 0`, loaded ahead on worker threads.

Workers are threads, not processes: they share the dataset (no pickling, no copies, no
start-up cost), and numpy releases the GIL in its kernels, so loading written with numpy
overlaps with the training step. Up to `prefetch_factor * num_workers` batches are loaded
ahead; batches come back in the sampler's order (`in_order=False`: as they are ready). Each
worker runs `worker_init_fn(worker_id)` first, and draws its random numbers (`pa.randn`,
dropout, `nn.init` without a generator) from its own generator, seeded `base_seed +
worker_id` with `base_seed` drawn once per epoch from the loader's `generator` (else the
current one): a loader's augmentations are reproducible whatever the threads' timing.
`get_worker_info()` tells the code running in a worker which one it is.

Accepted for PyTorch's signature, with no effect on a CPU-only library that loads with
threads: `pin_memory`, `pin_memory_device`, `multiprocessing_context`.

Thread safety: iterate one loader's iterator from one thread; the dataset's `__getitem__`
is called from several worker threads at once.
"""
from __future__ import annotations

import collections.abc
import queue
import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import TimeoutError as _FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ... import random as _random
from ...ops.shape import stack
from ...tensor import Tensor
from .dataset import Dataset, IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]


# ---- collation ---------------------------------------------------------------------------------
def default_convert(data):
    """numpy arrays and numbers in `data` (recursively) as tensors, without batching (what
    a DataLoader with `batch_size=None` applies to each sample)."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray) and data.dtype.kind in "biufc":
        return Tensor(data)
    if isinstance(data, np.generic) and np.asarray(data).dtype.kind in "biufc":
        return Tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()}) \
            if _rebuildable(data) else {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


def _rebuildable(mapping) -> bool:
    try:
        type(mapping)({})
        return True
    except TypeError:
        return False


def default_collate(batch):
    """A list of samples as one batch, PyTorch's rules: tensors and numpy arrays stacked
    along a new first dimension; Python floats a float64 tensor, ints an int64 tensor;
    strings kept as a list; dicts, named tuples and sequences collated field by field."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind not in "biufc":
            raise TypeError(_collate_message(elem.dtype))
        return Tensor(np.stack(batch))
    if isinstance(elem, np.generic):
        return Tensor(np.asarray(batch))
    if isinstance(elem, bool):
        return Tensor(np.asarray(batch, dtype=np.bool_))
    if isinstance(elem, int):
        return Tensor(np.asarray(batch, dtype=np.int64))
    if isinstance(elem, float):
        return Tensor(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        out = {k: default_collate([d[k] for d in batch]) for k in elem}
        return type(elem)(out) if _rebuildable(elem) else out
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if len({len(e) for e in batch}) != 1:
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, (list, tuple)):  # a tuple gives a list, as PyTorch's
            return fields
        return type(elem)(fields) if _rebuildable_seq(elem) else fields
    raise TypeError(_collate_message(type(elem)))


def _rebuildable_seq(seq) -> bool:
    try:
        type(seq)([])
        return True
    except TypeError:
        return False


def _collate_message(what) -> str:
    return (f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
            f"lists; found {what}")


# ---- workers ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` returns in a worker: its `id`, `num_workers`, the `seed` its
    generator was seeded with, and the `dataset`."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker = threading.local()


def get_worker_info() -> WorkerInfo | None:
    """This worker's `WorkerInfo` inside a DataLoader worker thread, else None."""
    return getattr(_worker, "info", None)


class _Workers:
    """The worker threads of one loader (or one epoch). Task k goes to worker k % n, as
    PyTorch assigns batches to worker processes, so which worker loads which batch (and
    so what it draws from its generator) does not depend on timing. Each thread takes its
    worker id, seeds its own generator and runs `worker_init_fn` before its first task."""

    def __init__(self, loader: "DataLoader", base_seed: int):
        self.n = loader.num_workers
        self._queues = [queue.SimpleQueue() for _ in range(self.n)]
        self._loader, self._seed = loader, base_seed
        self._threads = [threading.Thread(target=self._run, args=(wid,), daemon=True,
                                          name=f"pa-dataloader-{wid}")
                         for wid in range(self.n)]
        for t in self._threads:
            t.start()

    def submit(self, k: int, fn, *args) -> Future:
        """Run `fn(*args)` on worker `k % n`; its Future."""
        f = Future()
        self._queues[k % self.n].put((f, fn, args))
        return f

    def _run(self, wid: int) -> None:
        seed = (self._seed + wid) % 2**64
        _worker.info = WorkerInfo(wid, self.n, seed, self._loader.dataset)
        # this thread's draws come from its own generator (for the rest of its life)
        _random.use_generator(np.random.default_rng(seed))
        failed = None
        try:
            if self._loader.worker_init_fn is not None:
                self._loader.worker_init_fn(wid)
        except BaseException as e:  # noqa: BLE001  (every task of this worker re-raises it)
            failed = e
        q = self._queues[wid]
        while True:
            item = q.get()
            if item is None:
                return
            f, fn, args = item
            if not f.set_running_or_notify_cancel():
                continue
            if failed is not None:
                f.set_exception(failed)
                continue
            try:
                f.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001  (re-raised on the caller's thread)
                f.set_exception(e)

    def shutdown(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join()


class DataLoader:
    """Batches of `dataset`, PyTorch's DataLoader (see the module docstring for workers).

    `batch_size=None` turns batching off (each sample converted by `default_convert`);
    `shuffle=True` draws a new order each epoch (from `generator`, else the current
    generator); `sampler` / `batch_sampler` choose the indices instead; `drop_last` drops
    the last short batch; `collate_fn` makes a batch from a list of samples
    (`default_collate`); `timeout` (seconds, workers only) bounds the wait for a batch.
    """

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Sampler | None = None, batch_sampler: Sampler | None = None,
                 num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable | None = None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, pin_memory_device: str = "",
                 in_order: bool = True) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers, self.timeout = num_workers, timeout
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.worker_init_fn, self.generator = worker_init_fn, generator
        self.pin_memory, self.pin_memory_device = pin_memory, pin_memory_device
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers, self.in_order = persistent_workers, in_order
        self._iterable = isinstance(dataset, IterableDataset)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = self._samplers(dataset, batch_size, shuffle, sampler,
                                                          batch_sampler, drop_last, generator)
        if batch_sampler is not None:
            self.batch_size, self.drop_last = None, False
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if self.batch_sampler is not None or
            (self._iterable and batch_size is not None) else default_convert)
        self._workers = None

    def _samplers(self, dataset, batch_size, shuffle, sampler, batch_sampler, drop_last,
                  generator):
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
            return None, None
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            return sampler, batch_sampler
        if batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else \
                SequentialSampler(dataset)
        if batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        return sampler, batch_sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # TypeError if the dataset has no length, as PyTorch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def __iter__(self):
        if self.num_workers == 0:
            return self._single()
        return self._threaded()

    # ---- one thread ----
    def _fetch(self, key):
        if self.batch_sampler is not None:
            return self.collate_fn([self.dataset[i] for i in key])
        return self.collate_fn(self.dataset[key])

    def _keys(self):
        return iter(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def _single(self):
        if self._iterable:
            yield from self._stream(iter(self.dataset))
            return
        for key in self._keys():
            yield self._fetch(key)

    def _stream(self, it):
        """Batches of an iterable dataset's samples."""
        if self.batch_size is None:
            for sample in it:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in it:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    # ---- worker threads ----
    def _pool(self) -> _Workers:
        base = int(_random.resolve_generator(self.generator).integers(0, 2**63 - 1))
        if not self.persistent_workers:
            return _Workers(self, base)
        if self._workers is None:
            self._workers = _Workers(self, base)
        return self._workers

    def _threaded(self):
        workers = self._pool()
        try:
            if self._iterable:
                yield from self._threaded_stream(workers)
            else:
                yield from self._threaded_map(workers)
        finally:
            if not self.persistent_workers:
                workers.shutdown()

    def _result(self, future: Future):
        try:
            return future.result(timeout=self.timeout or None)
        except _FutureTimeout:
            raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None

    def _threaded_map(self, workers: _Workers):
        keys = self._keys()
        ahead = max(1, self.prefetch_factor * self.num_workers)
        pending: collections.deque = collections.deque()
        try:
            for k, key in enumerate(keys):
                pending.append(workers.submit(k, self._fetch, key))
                if len(pending) >= ahead:
                    yield self._next(pending)
            while pending:
                yield self._next(pending)
        finally:
            for f in pending:
                f.cancel()

    def _next(self, pending: collections.deque):
        if self.in_order:
            return self._result(pending.popleft())
        done, _ = wait(pending, timeout=self.timeout or None, return_when=FIRST_COMPLETED)
        if not done:
            raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
        f = next(iter(done))
        pending.remove(f)
        return f.result()

    def _threaded_stream(self, workers: _Workers):
        """Each worker iterates the dataset (its `get_worker_info()` tells it which share
        to produce); their batches come back round robin, as PyTorch's."""
        n = self.num_workers
        channels = [queue.Queue(max(1, self.prefetch_factor)) for _ in range(n)]
        stop = threading.Event()
        done = object()

        def produce(ch: queue.Queue) -> None:
            try:
                for batch in self._stream(iter(self.dataset)):
                    while not stop.is_set():
                        try:
                            ch.put(("ok", batch), timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                ch.put(("ok", done))
            except BaseException as e:  # noqa: BLE001  (re-raised on the caller's thread)
                ch.put(("error", e))

        futures = [workers.submit(i, produce, ch) for i, ch in enumerate(channels)]
        live = list(range(n))
        try:
            while live:
                for i in list(live):
                    try:
                        kind, item = channels[i].get(timeout=self.timeout or None)
                    except queue.Empty:
                        raise RuntimeError(f"DataLoader timed out after {self.timeout} "
                                           f"seconds") from None
                    if kind == "error":
                        raise item
                    if item is done:
                        live.remove(i)
                    else:
                        yield item
        finally:
            stop.set()
            for f in futures:
                f.cancel()

    def __del__(self):
        workers = getattr(self, "_workers", None)
        if workers is not None:
            workers.shutdown()
