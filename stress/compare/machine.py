"""The machine and interpreter the benchmark runs on: what else is running
(`Contention`, `wait_quiet`), how far threads can overlap small numpy kernels at all
(`numpy_scaling`) and the versions that go into the report (`environment`)."""
from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
import sysconfig
import threading
import time

import numpy as np

from parallel_autograd.engine.cost import gil_enabled

from .report import log


class Contention:
    """CPU time used by other processes (and the hypervisor) while we measure.

    From /proc/stat (all CPUs busy, steal included) minus this process's own CPU time
    (every thread), over wall time: 0.0 is a quiet machine, 1.0 a core's worth of
    competing work. None where /proc/stat is unavailable.
    """

    def __init__(self):
        self.start = self._snapshot()

    @staticmethod
    def _snapshot():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal (guest time is inside user)
        busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields)) / hz
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return busy, ru.ru_utime + ru.ru_stime, time.perf_counter()

    def cores(self):
        """Cores' worth of CPU other processes used since construction (None: unknown)."""
        end = self._snapshot()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        foreign = (end[0] - self.start[0]) - (end[1] - self.start[1])
        return max(0.0, foreign / (end[2] - self.start[2]))


def wait_quiet(limit: float, noisy: float, name: str) -> None:
    """Sleep in 2-second windows until other processes use <= `noisy` cores (or `limit`
    seconds have passed)."""
    t0 = time.perf_counter()
    busy = None
    while time.perf_counter() - t0 < limit:
        meter = Contention()
        time.sleep(2.0)
        busy = meter.cores()
        if busy is None or busy <= noisy:
            break
    waited = time.perf_counter() - t0
    if waited > 2.5:
        log(f"  {name}: waited {waited:.0f} s for a quieter machine "
            f"(other processes last used {busy:.2f} cores)")


def _tanh_loop(size, n):
    a, c1, c2 = np.ones(size), float("1.0001"), float("0.1")  # thread-private
    for _ in range(n):
        a = np.tanh(a * c1 + c2)


def numpy_scaling(threads, sizes=(64, 2048), steps=3000, reps=3) -> dict:
    """The ceiling for graphs of small nodes on this machine and interpreter: `threads`
    threads each running `steps` of `a = tanh(a * 1.0001 + 0.1)` on `size` elements,
    against one thread running them all (the experiment that motivated free-threaded
    CPython support). Returns {size: speedup}, medians of `reps`. No engine involved."""
    out = {}
    for size in sizes:
        one, many = [], []
        for _ in range(reps):
            t = time.perf_counter()
            _tanh_loop(size, steps * threads)
            one.append(time.perf_counter() - t)
            ths = [threading.Thread(target=_tanh_loop, args=(size, steps))
                   for _ in range(threads)]
            t = time.perf_counter()
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            many.append(time.perf_counter() - t)
        out[str(size)] = statistics.median(one) / statistics.median(many)
    return out


def environment(torch) -> dict:
    """Interpreter, build, GIL, numpy, BLAS, torch, glibc and machine of this process."""
    from threadpoolctl import threadpool_info

    from parallel_autograd.allocator import glibc_version
    return {"python": platform.python_version(), "executable": sys.executable,
            "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": gil_enabled(), "numpy": np.__version__,
            "torch": None if torch is None else torch.__version__,
            "torch_threads": None if torch is None else torch.get_num_threads(),
            "blas": [{k: lib.get(k) for k in ("internal_api", "version", "num_threads")}
                     for lib in threadpool_info() if lib.get("user_api") == "blas"],
            "glibc": glibc_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count()}
