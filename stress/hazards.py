"""Fault kinds for hazards of the process around a call rather than of one graph:
each guards a bug adversarial testing found (issue: reliability holes).

- interrupt_commit: Ctrl+C lands while the engine writes `.grad` (SIGINT sent from
               inside the write-back, at a random leaf, or by a timer aimed at the
<<<<<<< HEAD
               last part of the call; with create_graph now and then) -> every leaf
               updated, or none.
- fork_busy:   `os.fork()` while another thread records ops, runs a parallel backward
               or draws random numbers (`pa.randn`, layer init, dropout), or (in a fresh
               interpreter) runs the process's first parallel call -> the child can
               record, draw, init a layer, run dropout and both engines, and exit in time.
=======
               last part of the call; with create_graph now and then), or around the
               pass (then three calls a unit, each at a random line of the call's set-up
               and tear-down on its caller) -> every leaf updated, or none; and BLAS threads back
               right after each call (raised above the harness's pin for them).
- fork_busy:   `os.fork()` while another thread records ops or runs a parallel
               backward, or (in a fresh interpreter) runs the process's first parallel
               call -> the child can record, run both engines and exit in time.
>>>>>>> r3-engine
- cross_close: two engines whose workers each `close()` the other mid-call -> both
               calls finish, gradients exact, no deadlock.
- memory:      branches with large arrays sending one shared input their
               contributions -> parked bytes and peak memory within the README's bound.

Each runner takes a `faults.FaultRun` and returns True (surfaced correctly), False
(a failure was reported) or None (nothing to do here, e.g. no fork on this platform).
"""
from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings

import numpy as np

import parallel_autograd as pa
from parallel_autograd import memory

from . import leaks
from .checks import (INTERRUPT_TAG, Interrupter, LineTrigger, Outcome, diff, in_call_bracket,
                     leaf_diffs, set_grads, snapshot, unchanged)

KINDS = ("interrupt_commit", "fork_busy", "cross_close", "memory")
_FORKS = 8  # forks per fork_busy unit


# ---- interrupt_commit ------------------------------------------------------------------
class _TripGrad(np.ndarray):
    """A `.grad` array that sends SIGINT to the main thread when the engine adds a
    gradient to it: `t.grad += g` in the write-back, or (create_graph) the recorded sum
    `add(t.grad, g)` that becomes the new `.grad`. Arithmetic runs on plain arrays; an
    in-place add returns this same object."""

    trip = None  # class-level: set to a callable to arm

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if ufunc is np.add and _TripGrad.trip is not None:
            _TripGrad.trip()
        args = tuple(x.view(np.ndarray) if isinstance(x, _TripGrad) else x for x in inputs)
        if out is not None:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, _TripGrad) else x
                                  for x in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return result


LINE_CALLS = 3  # calls a unit interrupts at a random line around the pass


def run_interrupt_commit(fr):
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return None
    fr.api = "backward"  # grad() writes no .grad
    seq, par = fr.build_pair()
    if not any(t.grad is not None for t in par.case.leaves):
        return None
    so = seq.run()
    if not fr.check_outcome(so, seq, "sequential call"):
        return False
    expected = [[t.grad for t in seq.case.leaves]]
    at_leaf = fr.rng.random() < 0.5
    # BLAS above the harness's pin for the interrupted calls, checked right after each
    with leaks.RaisedBlas(fr) as raised:
        if raised.active:  # a sequential fallback computes with its 2 BLAS threads
            set_grads(seq.case.leaves, fr.priors)
            if not fr.check_outcome(seq.run(), seq, "sequential call (BLAS raised)"):
                return False
            expected.append([t.grad for t in seq.case.leaves])
        length = None
        if not at_leaf:  # time the call once, to aim the timer at its end
            t0 = time.perf_counter()
            if not fr.check_outcome(par.run(), par, "engine call (timing)"):
                return False
            length = time.perf_counter() - t0
        mode = "leaf" if at_leaf else "timer"
        if not _interrupt_once(fr, par, mode, length, expected, raised):
            return False
        if LineTrigger.available():  # then at random lines around the pass
            counter = LineTrigger(in_call_bracket)
            with counter:
                out = par.run()
            if not fr.check_outcome(out, par, "engine call (counting its lines)"):
                return False
            for _ in range(LINE_CALLS if counter.count else 0):
                if not _interrupt_once(fr, par, "line", counter.count, expected, raised):
                    return False
    return True


def _interrupt_once(fr, par, mode, measure, expected, raised) -> bool:
    """One interrupted call (`_interrupted_call`), then its checks: BLAS back right after
    it, and its write-back all or nothing."""
    _arm_trips(par, fr.priors)
    po, via = _interrupted_call(fr, par, mode, measure)
    fr.h.report.notes_counter(f"interrupt_commit: {via.split(' ')[0]}")
    return (raised.check(f"a call interrupted at {via}")
            and _all_or_nothing(fr, par, po, via, expected))


def _all_or_nothing(fr, par, po, via, expected) -> bool:
    """After an interrupted call: every leaf has its gradient (one of the `expected`
    sets: the call completed, the interrupt came during or after the write-back), or
    none changed (it came before) and the call raised."""
    if po.hang or (po.exc is not None and INTERRUPT_TAG not in str(po.exc)):
        return fr.check_outcome(po, par, f"interrupted engine call ({via})")
    got = [t.grad for t in par.case.leaves]
    updated = max(sum(diff(e, g, "gradient") is None for e, g in zip(exp, got))
                  for exp in expected)
    if updated == len(got):
        return True
    problems = unchanged(par.case.leaves, par.before_objs, par.before_vals)
    if po.exc is None or problems:
        fr.fail("mismatch", f"interrupt ({via}) left a partial write-back: {updated} of "
                f"{len(got)} leaves updated", {"problems": problems[:20]})
        return False
    return True


def _arm_trips(par, priors):
    """Reset the leaves' .grad to the priors, each array one that can trip."""
    set_grads(par.case.leaves, priors)
    for t in par.case.leaves:
        if t.grad is not None:
            t.grad = t.grad.numpy().view(_TripGrad)
    par.before_objs, par.before_vals = snapshot(par.case.leaves)


def _interrupted_call(fr, par, mode, measure):
    """Run `par` with SIGINT armed: at a random `+=` of the write-back (mode "leaf"),
    from a timer aimed at the last 15% of a call `measure` seconds long, up to 2% past
    its end ("timer"), or at a random one of the `measure` lines the call runs around
    the pass on its caller ("line": its set-up and tear-down, `checks.in_call_bracket`,
    delivered where a real Ctrl+C then would be: `checks.LineTrigger`). Returns
    (outcome, how it was sent)."""
    po = Outcome()
    trigger = contextlib.nullcontext()
    with Interrupter(f"{INTERRUPT_TAG} (commit)") as irq:
        if mode == "leaf":
            n = sum(t.grad is not None for t in par.case.leaves)
            k = int(fr.rng.integers(n))
            count = [0]

            def trip():
                count[0] += 1
                if count[0] == k + 1:
                    irq.send()
            _TripGrad.trip = trip
            via = f"write-back, at leaf {k + 1} of {n}"
        elif mode == "timer":
            delay = measure * fr.rng.uniform(0.85, 1.02)
            irq.after(delay)
            via = f"timer at {delay * 1e3:.2f} of {measure * 1e3:.2f} ms"
        else:
            k = int(fr.rng.integers(max(measure, 1))) + 1
            trigger = LineTrigger(in_call_bracket, interrupt_at=k)
            via = f"line {k} of {measure} around the pass"
        try:
            with trigger:
                po = par.run()
        except KeyboardInterrupt:  # arrived after the call returned: it completed
            pass
        finally:
            _TripGrad.trip = None
    _TripGrad.trip = None  # even if the interrupt landed in the finally above
    if mode == "line":
        return po, via + (f" {trigger.fired_at}" if trigger.fired_at else ", not reached")
    return po, via + ("" if irq.fired.is_set() else ", not delivered")


# ---- fork_busy ---------------------------------------------------------------------------
# A fresh process forks while another of its threads runs the process's first parallel
# call (imports, pool start-up, BLAS set-up): the child must run a backward and exit 0.
FIRST_CALL_SCRIPT = r"""
import os, sys, threading, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import numpy as np
import parallel_autograd as pa
started = threading.Event()
def first_call():
    x = pa.tensor(np.ones((32, 32)), requires_grad=True)
    loss = sum(((x @ x) * float(i)).sum() for i in range(8))
    started.set()
    pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0).backward(loss)
t = threading.Thread(target=first_call)
t.start()
started.wait()
pid = os.fork()
if pid == 0:
    x = pa.tensor(np.ones(3), requires_grad=True)
    pa.backward_parallel((x * 2).sum(), num_workers=2)
    os._exit(0 if np.array_equal(x.grad, np.full(3, 2.0)) else 3)
t.join()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.01)
os.kill(pid, 9)
sys.exit(99)
"""


def _child_work() -> int:
    """In the forked child: draw, init a layer, record ops (dropout too), run both
    engines; 0 if the results agree."""
    pa.randn(8)
    lin = pa.nn.Linear(8, 8)  # both draw from the default generator
    x = pa.tensor(np.arange(1.0, 9.0), requires_grad=True)

    def loss():
        pa.manual_seed(5)  # the same dropout mask for both engines
        h = pa.nn.functional.dropout(pa.tanh(lin(x) * 0.5), 0.5)
        return (h * x).sum() + (x * x).sum()

    pa.backward(loss())
    want = x.grad.numpy().copy()
    x.grad = None
    pa.backward_parallel(loss(), num_workers=2)
    return 0 if np.array_equal(want, x.grad) else 3


def _draw_things(a) -> None:
    """What a thread drawing random numbers does (issue 25: the child hung on its first
    draw when the parent forked during one of these)."""
    pa.randn(64)
    pa.nn.Linear(8, 8)
    pa.nn.functional.dropout(a, 0.5)


def run_fork_busy(fr):
    if not hasattr(os, "fork"):
        return None
    deadline = max(10.0, fr.h.deadline_for(fr.build_pair()[0].case))
    stop = threading.Event()
    errors = []
    busy = str(fr.rng.choice(["recording", "backward", "first call", "drawing"],
                             p=[0.3, 0.3, 0.15, 0.25]))
    if busy == "first call":
        return _fork_in_first_call(fr)

    def background():  # records ops, or runs the unit's graph, again and again
        x = pa.tensor(np.ones(4), requires_grad=True)
        while not stop.is_set():
            try:
                if busy == "backward":
                    case = fr.build_pair()[1].case
                    fr.engine.backward(case.root, case.seed_grad)
                elif busy == "drawing":
                    _draw_things(x)
                else:
                    y = x
                    for _ in range(200):
                        y = y * 1.0
            except Exception as e:  # noqa: BLE001 - reported, the unit goes on
                errors.append(e)
                return
    t = threading.Thread(target=background, daemon=True, name="stress-busy")
    t.start()
    statuses = []
    try:
        for _ in range(_FORKS):  # a lock is held only now and then: fork several times
            time.sleep(fr.rng.uniform(0.0, 0.005))
            statuses.append(fork_call(_child_work, deadline))
            if statuses[-1] != 0:
                break
    finally:
        stop.set()
        t.join(30)
    status = statuses[-1]
    fr.h.report.notes_counter(f"fork_busy: while {busy}")
    if errors:
        fr.fail("error", f"the busy thread ({busy}) raised {errors[0]!r}")
        return False
    if status is None:
        fr.fail("hang", f"a child forked while another thread was {busy} did not finish "
                "in time (killed)")
        return False
    if status != 0:
        fr.fail("error", f"a child forked while another thread was {busy} exited "
                f"with status {status}")
        return False
    return True


def _fork_in_first_call(fr):
    """FIRST_CALL_SCRIPT in a fresh interpreter (the first call happens once a process)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(pa.__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        r = subprocess.run([sys.executable, "-c", FIRST_CALL_SCRIPT], env=env, timeout=120,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        fr.fail("hang", "a process forked during its first parallel call did not finish")
        return False
    fr.h.report.notes_counter("fork_busy: during the first call")
    if r.returncode != 0:
        fr.fail("hang" if r.returncode == 99 else "error",
                f"fork during the process's first parallel call: exit {r.returncode}",
                {"stderr": r.stderr[-2000:]})
        return False
    return True


def fork_call(child, timeout: float):
    """Fork; the child runs `child()` and exits with the code it returns (None: 0; an
    exception: 1), never returning into the caller. Returns the child's exit code, or
    None (after killing it) if it runs past `timeout` seconds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child() or 0
        finally:
            os._exit(code)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


# ---- cross_close -----------------------------------------------------------------------
def engines_closing_each_other(timeout: float = 30.0) -> dict:
    """Two forced engines, each running a backward (from its own thread) whose queued
    `Function.backward` closes the other engine while the caller keeps a slow branch.
    Returns {"engines", "hung" (a call did not finish in `timeout`), "grads" (name ->
    x.grad, 2.0 everywhere when right), "on_worker" (whether each close ran on a pool
    worker)}. Shared by the `cross_close` fault kind and its regression test."""
    barrier = threading.Barrier(2, timeout=10)
    engines = [pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0)
               for _ in range(2)]
    on_worker, grads = [], {}

    def closer(other):
        class CloseOther(pa.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1.0

            @staticmethod
            def backward(ctx, g):
                on_worker.append(threading.current_thread().name.startswith("pa-worker"))
                barrier.wait()
                other.close()
                return g
        return CloseOther

    slow = pa.primitive("stress_slow", lambda x: x * 1.0,
                        lambda g, ans, x: (time.sleep(0.2), g)[1])

    def run(i):
        x = pa.tensor(np.ones(4), requires_grad=True)
        # the caller keeps the slow branch (first input), the closing one is queued
        loss = slow(x).sum() + closer(engines[1 - i]).apply(x).sum()
        engines[i].backward(loss)
        grads[i] = x.grad.numpy().copy()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return {"engines": engines, "hung": any(t.is_alive() for t in threads),
            "grads": grads, "on_worker": on_worker}


def run_cross_close(fr):
    out = engines_closing_each_other()
    if out["hung"]:
        fr.fail("hang", "two engines closing each other from their workers deadlocked")
        return False
    grads = out["grads"]
    if len(grads) != 2 or not all(np.array_equal(g, np.full(4, 2.0)) for g in grads.values()):
        fr.fail("mismatch", f"engines closing each other: gradients {grads}")
        return False
    return all(fr.h.close_engine(e, "cross_close engine") is not False
               for e in out["engines"])


# ---- memory ------------------------------------------------------------------------------
def shared_input_branches(seed: int, branches: int, elems: int):
    """`sum_i tanh(x * a_i + b_i).sum()` on float64 vectors of `elems`: every branch sends
    x one contribution (summed in canonical order); a_i, b_i need no gradient.
    Returns (loss, x). Also the memory regression test's graph."""
    rng = np.random.default_rng(seed)
    x = pa.tensor(rng.standard_normal(elems), requires_grad=True)
    loss = None
    for _ in range(branches):
        a, b = (pa.tensor(rng.standard_normal(elems)) for _ in range(2))
        s = pa.tanh(x * a + b).sum()
        loss = s if loss is None else loss + s
    return loss, x


def traced_peak(run) -> int:
    """Peak bytes tracemalloc saw above the start while `run()` ran, with the caching
    allocator off (every buffer a new allocation, as the engine's stated bound counts)."""
    gc.collect()
    tracemalloc.start()
    try:
        with memory.caching_disabled():
            base = tracemalloc.get_traced_memory()[0]
            run()
            return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def run_memory(fr):
    if tracemalloc.is_tracing():
        return None
    rng = fr.rng
    workers = int(rng.integers(2, 5))
    branches, elems = int(rng.integers(8, 17)), int(2 ** rng.integers(16, 19))
    nbytes = elems * 8
    cap = int(rng.integers(1, 4)) * nbytes  # parked bytes allowed: 1 to 3 contributions
    loss, want = shared_input_branches(fr.seed, branches, elems)
    seq = traced_peak(lambda: pa.backward(loss))
    loss, x = shared_input_branches(fr.seed, branches, elems)
    stats = {}
    with pa.Engine(workers, min_nodes=0, min_work=0, min_width=0, inline_below=0,
                   max_parked_bytes=cap) as eng:
        par = traced_peak(lambda: stats.setdefault("s", eng.backward(loss, stats=True)))
    st = stats["s"]
    where = (f"{branches} branches of {elems} elements, {workers} workers, "
             f"max_parked_bytes={cap // nbytes} contributions")
    problems = leaf_diffs([want.grad], [x])
    if problems:
        fr.fail("mismatch", f"memory ({where}): {problems[0]}")
        return False
    # README, "Known limits": once the cap is reached no thread starts new work, so
    # each other thread parks at most one contribution more, and holds at most one
    # node's working set (here 2 arrays) beyond the sequential peak.
    if st.parked_peak > cap + (workers - 1) * nbytes:
        fr.fail("memory", f"{where}: {st.parked_peak / nbytes:.1f} contributions parked, "
                "over the cap plus one per other thread")
        return False
    bound = seq + (workers - 1) * 2 * (2 * nbytes) + cap
    if par > bound:
        fr.fail("memory", f"{where}: peak {par / nbytes:.1f} arrays, over the bound "
                f"{bound / nbytes:.1f} (sequential {seq / nbytes:.1f})")
        return False
    return True


RUNNERS = {"interrupt_commit": run_interrupt_commit, "fork_busy": run_fork_busy,
           "cross_close": run_cross_close, "memory": run_memory}
