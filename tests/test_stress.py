"""The stress harness: a short profile of every family and fault kind passes on the
real engine, and deliberately broken engines (built here, never by editing the
engine) are caught: out-of-order and unlocked accumulation, hangs, lost errors,
leaked threads and memory, an allocator whose requests scan its blocks in use; calls with
several roots finished before all of them ran; an optimizer step a Ctrl+C leaves half done;
and for create_graph passes, a recorded graph numbered differently, a write-back that is
not all-or-nothing, recorded graphs kept alive."""
from __future__ import annotations

import json
import os
import shlex
import queue
import subprocess
import sys
import time

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import memory
from conftest import assert_bitwise
from parallel_autograd.engine import blas
from parallel_autograd.engine import engine as engine_module
from parallel_autograd.engine import sequential as sequential_module
from parallel_autograd.engine import step as step_module
from parallel_autograd.engine import strategy as strategy_module
from parallel_autograd.engine import task as task_module
from parallel_autograd import grad_mode as grad_mode_module
from parallel_autograd.grad_mode import enable_grad
from parallel_autograd.node import next_seq
from stress import faults, graphs, higher, multiroot
from stress.__main__ import main, parse_args
from stress.checks import default_engine_factory, simulated_cores
from stress.leaks import blas_counts, set_blas_counts
from stress.harness import Config, run
from stress.watchdog import HangDetected, Watchdog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = dict(profile="quick", progress=False, checkpoint_every=30.0)


def quick(**kw):
    return Config(**{**QUICK, **kw})


# ---- the real engine passes -----------------------------------------------------------------
def test_every_family_and_fault_kind_pass_on_the_real_engine():
    fams = tuple(graphs.FAMILIES)
    kinds = faults.ALL_KINDS
    rep = run(quick(iterations=max(len(fams), len(kinds)), faults=kinds, threads=3))
    assert rep.ok, rep.summary()
    for f in fams:
        st = rep.families[f]
        assert st.graphs > 0 and st.comparisons > 0 and st.mismatches == 0, f
    for k in kinds:
        injected, surfaced = rep.faults_by_kind[k]
        assert injected >= 1 and surfaced == injected, (k, rep.faults_by_kind)
    assert rep.leak_checks, "no leak checkpoint ran"
    t = rep.total()
    assert t.hangs == 0 and t.leaks == 0 and t.errors == 0
    units = max(len(fams), len(kinds))
    cg = sum(fams[i % len(fams)] in higher.CREATE_GRAPH_FAMILIES for i in range(units))
    assert rep.counters["create_graph: graphs checked"] == cg, rep.counters
    assert rep.counters["multi-root: graphs checked"] == units, rep.counters
    assert rep.counters["multi-root: failing root surfaced"] == units, rep.counters
    assert rep.counters["multi-root: parallel calls"] > units, rep.counters


def test_generators_are_reproducible_from_the_seed():
    for fam in graphs.FAMILIES:
        a = graphs.build(fam, 42, 0.02)
        b = graphs.build(fam, 42, 0.02)
        assert a.nodes == b.nodes and a.nodes > 0
        assert_bitwise([a.root.numpy()], [b.root.numpy()], f"{fam} root")
        assert_bitwise([t.numpy() for t in a.leaves], [t.numpy() for t in b.leaves], f"{fam} leaf")
        assert all(x is not y for x, y in zip(a.leaves, b.leaves))
    pool = {}
    a = graphs.build("shared", 7, 0.02, shared=pool)
    b = graphs.build("shared", 7, 0.02, shared=pool)
    assert all(x is y for x, y in zip(a.leaves, b.leaves))
    assert a.root.grad_fn is not b.root.grad_fn


def test_families_cover_deep_partial_frozen_and_broadcast_graphs():
    deep = graphs.build("deep", 0, 1.0)
    assert deep.nodes >= 100_000
    part = graphs.build("partial", 3, 0.3)
    assert any(not t.requires_grad for t in part.leaves)
    tr = graphs.build("transformer", 0, 1.0)
    assert any(not t.requires_grad for t in tr.leaves)   # frozen weights
    assert sum(t.requires_grad for t in tr.leaves) >= 2   # adapters / norms
    br = graphs.build("broadcast", 1, 0.2)
    assert len({t.shape for t in br.leaves}) >= 2


# ---- broken engines are caught --------------------------------------------------------------
def _contribute_in_arrival_order(self, slot, rank, g):
    """Broken: adds contributions as they arrive instead of in canonical order."""
    with self.lock:
        if g is not None:
            if slot.buf is None:
                slot.buf = g
            else:
                slot.buf = slot.buf + g
                slot.owned = True
        slot.next_rank += 1
        return slot.take() if slot.next_rank == slot.total else None


def _contribute_reversed(self, slot, rank, g):
    """Broken: waits for every contribution, then sums them in reverse order."""
    with self.lock:
        if slot.parked is None:
            slot.parked = {}
        slot.parked[rank] = g
        slot.next_rank += 1
        if slot.next_rank < slot.total:
            return None
        parts = [slot.parked[r] for r in sorted(slot.parked, reverse=True)]
        slot.parked = None
    buf = None
    for p in parts:
        if p is not None:
            buf = p if buf is None else buf + p
    slot.buf, slot.owned = buf, True
    return slot.take()


def _contribute_unlocked(self, slot, rank, g):
    """Broken: arrival order and no lock (read-modify-write races)."""
    buf = slot.buf
    time.sleep(0)
    if g is not None:
        slot.buf = g if buf is None else buf + g
    n = slot.next_rank
    time.sleep(0)
    slot.next_rank = n + 1
    return slot.take() if slot.next_rank == slot.total else None


ORDER_FAMILIES = ("shared", "wide", "random", "lstm")


def test_detects_accumulation_out_of_canonical_order(monkeypatch):
    monkeypatch.setattr(strategy_module.Ranked, "contribute", _contribute_reversed)
    rep = run(quick(iterations=4, families=ORDER_FAMILIES, faults=(), threads=1,
                    workers=(1, 2), tracemalloc=False))
    assert not rep.ok
    mism = [f for f in rep.failures if f.kind == "mismatch"]
    assert mism, rep.summary()
    f = mism[0]
    assert f.family in ORDER_FAMILIES and f.seed is not None
    assert f"--replay {f.seed}" in f.replay and f"--families {f.family}" in f.replay
    assert rep.total().mismatches > 0


def test_detects_arrival_order_accumulation(monkeypatch):
    """Timing decides the arrival order, so give it a few graphs with many
    contributions per gradient and slow rules; any mismatch (or hang) is a catch."""
    monkeypatch.setattr(strategy_module.Ranked, "contribute", _contribute_in_arrival_order)
    rep = run(quick(iterations=8, families=("shared", "wide"), faults=(), threads=1,
                    workers=(4,), variants=("queue",), scale=0.3, tracemalloc=False))
    assert rep.total().mismatches > 0, rep.summary()


def test_detects_unlocked_accumulation(monkeypatch):
    monkeypatch.setattr(strategy_module.Ranked, "contribute", _contribute_unlocked)
    rep = run(quick(iterations=4, families=("shared", "wide"), faults=(), threads=1,
                    workers=(4,), variants=("queue",), scale=0.3, deadline=2.0,
                    tracemalloc=False))
    t = rep.total()
    assert t.mismatches + t.hangs + t.errors > 0, rep.summary()


def test_detects_unlocked_leaf_accumulation_under_concurrency(monkeypatch):
    def racy_commit(staged):
        for t, g, _owned in staged:
            old = t.grad
            time.sleep(0.002)  # widen the read-modify-write window
            t.grad = g.copy() if old is None else old + g

    monkeypatch.setattr(engine_module, "commit", racy_commit)
    rep = run(quick(iterations=2, families=("shared", "mlp"), faults=(), threads=4,
                    rounds=2, workers=(2,), variants=("queue",), tracemalloc=False))
    conc = [f for f in rep.failures if f.kind == "mismatch" and "concurrency" in f.message]
    assert conc, rep.summary()
    assert any("lost update" in f.message for f in conc), [f.message for f in conc]


def _break_completion(monkeypatch):
    """Broken: a call's completion is never signalled, so its caller waits forever."""
    monkeypatch.setattr(task_module.GraphTask, "_check_done", lambda self: False)


def test_detects_a_hanging_engine_and_goes_on(monkeypatch):
    _break_completion(monkeypatch)
    rep = run(quick(iterations=2, families=("random", "wide"), faults=(), threads=1,
                    workers=(2,), variants=("queue",), deadline=0.5,
                    deadline_per_node=0.0, tracemalloc=False, create_graph=(),
                    multi_root=0))
    hangs = [f for f in rep.failures if f.kind == "hang"]
    assert hangs and rep.total().hangs >= 2, rep.summary()
    dump = hangs[0].details["stacks"]
    assert "Thread" in dump and "in wait" in dump and "pa-worker" in dump
    assert rep.families["wide"].graphs >= 1  # the run went on after the first hang
    assert hangs[0].replay and "--replay" in hangs[0].replay


def test_stops_at_first_hang_when_asked(monkeypatch):
    _break_completion(monkeypatch)
    rep = run(quick(iterations=3, families=("random",), faults=(), threads=1, workers=(2,),
                    variants=("queue",), deadline=0.5, deadline_per_node=0.0,
                    on_hang="stop", tracemalloc=False))
    assert rep.stopped_early and "hang" in rep.stopped_early
    assert rep.units <= 1


_sleepy = pa.primitive("sleepy", lambda x: x * 1.0, lambda g, ans, x: (time.sleep(1.5), g)[1])


def _gen_sleepy(ctx):
    x = ctx.leaf((4,))
    return (_sleepy(pa.tanh(x)) * x).sum()


def test_detects_a_node_that_sleeps_past_the_deadline():
    rep = run(quick(iterations=1, families=("sleepy",), faults=(), threads=1, workers=(2,),
                    variants=("queue",), deadline=0.4, deadline_per_node=0.0,
                    tracemalloc=False, multi_root=0),
              families={"sleepy": _gen_sleepy})
    hangs = [f for f in rep.failures if f.kind == "hang"]
    assert hangs and hangs[0].family == "sleepy"
    assert "sleepy" in hangs[0].details["stacks"] or "sleep" in hangs[0].details["stacks"]


def test_detects_lost_errors(monkeypatch):
    """An engine that drops node failures and carries on."""
    monkeypatch.setattr(task_module.GraphTask, "fail", lambda self, exc: None)
    rep = run(quick(iterations=3, families=("random", "wide", "mlp"),
                    faults=("node_error",), threads=1, workers=(2,), variants=("queue",),
                    tracemalloc=False))
    kinds = {f.kind for f in rep.failures}
    assert "lost-fault" in kinds, rep.summary()
    assert any(f.replay and "--faults node_error" in f.replay for f in rep.failures)


class _ScanningAllocator(memory.CachingAllocator):
    """Issue 25, item 5 re-introduced: each request looks at every block in use of its
    size (as the search for a block nobody referenced did) before taking a free one."""

    def _block(self, size):
        looked = 0
        for blk in list(self._leased.values()):
            if blk.size == size:
                looked += 1
        return super()._block(size)


def test_detects_an_allocator_whose_requests_scan_the_blocks_in_use(monkeypatch):
    monkeypatch.setattr(memory, "CachingAllocator", _ScanningAllocator)
    rep = run(quick(iterations=2, families=("wide",), faults=("alloc_work",), threads=1,
                    workers=(2,), variants=("queue",), tracemalloc=False))
    found = [f for f in rep.failures if f.kind == "alloc_work"]
    assert found and "grows with the blocks in use" in found[0].message, rep.summary()
    assert found[0].replay and "--faults alloc_work" in found[0].replay


class _LeakyEngine(pa.Engine):
    """close() forgets to stop the workers."""

    def close(self):
        self._closed = True


def test_detects_threads_left_by_close():
    def factory(w, variant):
        if variant == "queue":
            return _LeakyEngine(w, min_nodes=0, min_work=0, min_width=0, inline_below=0)
        return default_engine_factory(w, variant)

    rep = run(quick(iterations=1, families=("wide",), faults=(), threads=1,
                    workers=(3,), variants=("queue",), tracemalloc=False),
              engine_factory=factory)
    leaks = [f for f in rep.failures if f.kind == "leak"]
    assert leaks and any("thread" in f.message for f in leaks), rep.summary()


_hoard = []


class _HoardingEngine(pa.Engine):
    """Keeps every graph it ever saw alive."""

    def backward(self, root, grad=None, retain_graph=False, stats=False, **kw):
        _hoard.append(root)
        return super().backward(root, grad, retain_graph, stats, **kw)


def test_detects_memory_growth_across_iterations():
    def factory(w, variant):
        return _HoardingEngine(w, min_nodes=0, min_work=0, min_width=0, inline_below=0)

    try:
        rep = run(quick(iterations=1, families=("wide",), faults=(), threads=1,
                        workers=(2,), variants=("queue",), leak_bytes=4096),
                  engine_factory=factory)
    finally:
        _hoard.clear()
    leaks = [f for f in rep.failures if f.kind == "leak"]
    assert leaks and any("grows" in f.message for f in leaks), rep.summary()


def _restore_nothing():
    """Broken blas._restore: forgets what it lowered without setting it back."""
    blas._changed.clear()
    blas._before = None
    blas._target = None


BLAS_RUN = dict(iterations=2, families=("shared", "random"), faults=(), threads=3,
                workers=(2,), variants=("queue",), blas_threads=None, tracemalloc=False)


def test_detects_blas_threads_left_lowered_after_concurrent_calls(monkeypatch,
                                                                  blas_two_threads):
    monkeypatch.setattr(blas, "_restore", _restore_nothing)
    rep = run(quick(**BLAS_RUN))
    found = [f for f in rep.failures if f.kind == "blas-threads"]
    assert found, rep.summary()
    conc = [f for f in found if "after the concurrency check" in f.message]
    assert conc, [f.message for f in found]
    f = conc[0]
    assert "2 -> 1" in f.message and f.details["now"] != f.details["start"]
    assert f"--replay {f.seed}" in f.replay and f"--families {f.family}" in f.replay
    assert f.family in BLAS_RUN["families"] and rep.total().leaks >= len(found)
    assert blas._holders is not None and blas.holders() == 0


def test_blas_threads_check_passes_when_the_engine_restores(blas_two_threads):
    """The same run on the real engine: BLAS is lowered during its calls (the check
    would see it) and restored after them, so nothing is reported."""
    rep = run(quick(**BLAS_RUN))
    assert not [f for f in rep.failures if f.kind == "blas-threads"], rep.summary()
    assert blas_counts() == {p: 2 for p in blas_two_threads}


def test_detects_a_call_raising_the_callers_blas_limit(monkeypatch):
    """Broken blas._lower sets every library to what the call asked for, raising the
    harness's pinned 1 thread: the many_cores variant (16 simulated cores, so 2 workers
    ask for 8) sees it inside its calls, though the count is restored after them."""
    start = blas_counts()
    if not start:
        pytest.skip("threadpoolctl finds no BLAS")

    def raising_lower(threads):
        for lib, before in blas._before:
            if blas._set(lib, threads):
                blas._changed.append((lib, before, threads))

    monkeypatch.setattr(blas, "_lower", raising_lower)
    rep = run(quick(iterations=1, families=("shared",), faults=(), threads=1,
                    workers=(2,), variants=("many_cores",), tracemalloc=False))
    found = [f for f in rep.failures if f.kind == "blas-threads"]
    assert found and all("16 simulated cores" in f.message for f in found), rep.summary()
    assert all("ran with 8 BLAS thread(s); its caller had 1" in f.message for f in found)
    in_unit = [f for f in found if f.seed is not None]  # the others: the warm-up's calls
    assert in_unit and "--variants many_cores" in in_unit[0].replay, rep.summary()
    assert blas_counts() == start  # the harness's pin ended, nothing left raised


def _release_only_on_success(self, task, ready, st):
    """Broken Engine._run_limited: releases its BLAS limit only when the call succeeds,
    as an interrupt between the acquire and the release used to leave it (item 11)."""
    st.blas_threads = blas.acquire(task, max(1, engine_module.usable_cores() //
                                             self.num_workers))
    task.run_to_completion(ready)
    blas.release(task)


@pytest.mark.skipif(not blas_counts(), reason="threadpoolctl finds no BLAS")
@pytest.mark.parametrize("kind", ["interrupt", "interrupt_commit"])
def test_interrupt_kinds_detect_blas_left_lowered_by_an_interrupted_call(monkeypatch, kind):
    """Under the harness's pin (BLAS at 1 thread) no call lowers anything; the interrupt
    kinds raise BLAS to 2 around their interrupted calls and check it right after each."""
    monkeypatch.setattr(engine_module.Engine, "_run_limited", _release_only_on_success)
    start = blas_counts()
    rep = run(quick(iterations=6, families=("shared", "random", "wide"), faults=(kind,),
                    threads=1, workers=(2,), variants=("queue",), multi_root=0,
                    tracemalloc=False))
    found = [f for f in rep.failures if f.kind == "blas-threads"
             and f"fault:{kind}" in f.message and "interrupted" in f.message]
    assert found, rep.summary()
    assert any("2 -> 1" in f.message for f in found), [f.message for f in found]
    assert f"--faults {kind}" in found[0].replay
    assert blas_counts() == start, "BLAS not back to where the run started"
    # The broken engine's interrupted calls are holders that vanished without a release:
    # blas keeps what they lowered for the next acquire to restore (invariant 3), which
    # would then restore a count from this test in a later one. Settle it here.
    import gc

    class _Token:
        pass

    gc.collect()
    blas.release(_Token())
    set_blas_counts(start)


def test_simulated_cores_is_restored_on_error_and_when_nested():
    real = engine_module.usable_cores
    with pytest.raises(KeyError):
        with simulated_cores(16):
            with simulated_cores(16):
                assert engine_module.usable_cores() == 16
            assert engine_module.usable_cores() == 16
            raise KeyError("boom")
    assert engine_module.usable_cores is real


# ---- create_graph (higher-order gradients) ---------------------------------------------------
CG_RUN = dict(families=higher.CREATE_GRAPH_FAMILIES, threads=1, workers=(2,),
              variants=("queue",), tracemalloc=False)


def test_every_create_graph_family_records_and_differentiates_again():
    """Each family of the list makes graphs whose every rule has a differentiable form
    (the harness's own ops included): grad(create_graph=True), then the second order."""
    for fam in higher.CREATE_GRAPH_FAMILIES:
        for seed in range(3):
            c = graphs.build(fam, seed, 0.02)
            g = pa.grad([c.root], c.grad_leaves, [c.seed_grad], create_graph=True,
                        allow_unused=True)
            p = higher.penalty(g)
            if p is not None:
                pa.grad(p, c.grad_leaves, allow_unused=True)
    x = pa.tensor(np.linspace(-2, 2, 7), requires_grad=True)
    assert pa.gradgradcheck(lambda t: graphs.scaled_tanh(t, 0.9), (x,))
    assert pa.gradgradcheck(graphs.softsign, (x,))


def test_create_graph_faults_pass_on_the_real_engine(monkeypatch):
    """Every fault kind that can run with create_graph does (monkeypatched: all of
    them), surfaces as on the sequential engine, leaves .grad untouched, and the engine
    then records the disarmed graph as the sequential engine does."""
    monkeypatch.setattr(faults, "CREATE_GRAPH_SHARE", 1.0)
    kinds = faults.CREATE_GRAPH_KINDS
    rep = run(quick(iterations=len(kinds), faults=kinds, **CG_RUN))
    assert rep.ok, rep.summary()
    for k in kinds:
        assert rep.counters.get(f"create_graph: fault {k}") == 1, (k, rep.counters)
        injected, surfaced = rep.faults_by_kind[k]
        assert injected == surfaced == 1, (k, rep.faults_by_kind)


def test_an_injected_rule_fails_a_create_graph_pass_through_its_differentiable_form():
    """A create_graph pass runs the rule's differentiable form, not the numpy rule:
    `patch_rule` replaces both, so node_error raises the injected error there (naming
    the op, no .grad changed), and a pass-through patch records the same graph."""
    case = graphs.build("lstm", 4, 0.02)
    c = case.grad_leaves
    node = faults.fault_nodes(case, leaves_ok=False)[3]

    def run_cg(call):
        first = next_seq()
        g = call.grad([case.root], c, [case.seed_grad], retain_graph=True, allow_unused=True,
                      create_graph=True)
        return g, higher.made_graph(g, first, higher.base_index(case.root))[0]

    want, want_graph = run_cg(faults.SEQUENTIAL)
    undo = faults.patch_rule(node, lambda orig: orig)  # pass-through
    got, graph = run_cg(faults.SEQUENTIAL)
    undo()
    assert_bitwise([g.numpy() for g in want], [g.numpy() for g in got])
    assert graph == want_graph and len(graph) > 10

    def raiser(orig):
        def rule(g, *saved):
            raise faults.StressFault("injected")
        return rule

    undo = faults.patch_rule(node, raiser)
    with pa.Engine(2, min_nodes=0, min_work=0, min_width=0, inline_below=0) as eng:
        for call in (faults.SEQUENTIAL, eng):
            for t in c:
                t.grad = None
            with pytest.raises(faults.StressFault) as e:
                call.backward(case.root, case.seed_grad, retain_graph=True,
                              create_graph=True)
            assert e.value.autograd_op == node.name
            assert all(t.grad is None for t in c)
    undo()


def test_detects_a_recorded_graph_numbered_in_thread_order(monkeypatch):
    """The parallel engine skipping `renumber` (its nodes keep the seqs they got in
    the order the threads made them): the recorded graph differs from the sequential
    engine's, and so does the second order, and the failure replays."""
    monkeypatch.setattr(engine_module, "renumber", lambda made: made.clear())
    rep = run(quick(iterations=4, faults=(), **CG_RUN))
    graph = [f for f in rep.failures if f.kind == "mismatch"
             and "recorded graph differs" in f.message]
    assert graph and rep.total().mismatches >= len(graph), rep.summary()
    assert any("second order" in f.message for f in rep.failures), rep.summary()
    f = graph[0]
    assert f.message.startswith("create_graph queue x2") and f.family in CG_RUN["families"]
    assert f"--replay {f.seed}" in f.replay and f"--families {f.family}" in f.replay


def test_detects_a_nested_create_graph_pass_numbered_on_its_own(monkeypatch):
    """A create_graph pass run by a hook of another (reentrant, seed 1 of wide) must hand
    its nodes to the enclosing pass (engine/graph.py `renumber`); numbered when it ends,
    they come before the nodes the hook made for them, and the harness says so."""
    cfg = quick(replay=1, families=("wide",), faults=("reentrant",), threads=1,
                workers=(2,), variants=("queue",), tracemalloc=False)
    monkeypatch.setattr(faults, "CREATE_GRAPH_SHARE", 1.0)
    rep = run(cfg)
    assert rep.ok and rep.counters.get("create_graph: nested pass in a reentrant hook") == 1

    def on_its_own(made):
        made.sort(key=lambda entry: entry[:2])
        for (_, _, node), seq in zip(made, sorted(next_seq() for _ in made)):
            node.seq = seq
        made.clear()

    monkeypatch.setattr(engine_module, "renumber", on_its_own)
    monkeypatch.setattr(sequential_module, "renumber", on_its_own)
    rep = run(cfg)
    found = [f for f in rep.failures if "numbered before its input" in f.message]
    assert found and "reentrant" in found[0].message, rep.summary()


def _write_graph_grads_one_by_one(staged):
    """Broken: each .grad is summed and assigned in turn (an interrupt in a later sum
    leaves the earlier leaves updated)."""
    with enable_grad():
        for t, g, _ in staged:
            cur = t.grad
            t.grad = g if cur is None else \
                (cur if isinstance(cur, pa.Tensor) else pa.Tensor._wrap(cur)) + g


def test_detects_a_create_graph_write_back_that_is_not_all_or_nothing(monkeypatch):
    """interrupt_commit with create_graph: SIGINT sent from the write-back's recorded
    sum of the 3rd of 4 leaves holding an array (seed 1 of wide) finds 3 of 6 leaves
    updated. Right, no leaf is: the sums are all made before any .grad is assigned."""
    cfg = quick(replay=1, families=("wide",), faults=("interrupt_commit",), threads=1,
                workers=(2,), variants=("queue",), tracemalloc=False)
    assert run(cfg).ok
    monkeypatch.setattr(step_module, "_write_graph_grads", _write_graph_grads_one_by_one)
    rep = run(cfg)
    partial = [f for f in rep.failures if "partial write-back" in f.message]
    assert partial and "create_graph" in partial[0].message, rep.summary()
    assert "--faults interrupt_commit" in partial[0].replay


class _NoDeferral:
    """Broken: a step's writes no longer hold Ctrl+C back (as before issue 25's fix)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_detects_an_optimizer_step_interrupted_halfway(monkeypatch):
    """optim_interrupt: with a step's writes no longer deferring SIGINT, step() raises in
    the middle of the caller's share (a step partly done) or from its join while a helper
    still writes (parameters written after it raised): 2-4 of 6 units find it (measured),
    so 12 run (all missing it: ~1 in 10,000). Right: no unit finds anything."""
    from parallel_autograd.optim import optimizer as optimizer_module

    cfg = quick(iterations=12, families=("random",), faults=("optim_interrupt",), threads=1,
                workers=(2,), variants=("queue",), tracemalloc=False, multi_root=0,
                create_graph=())
    rep = run(cfg)
    assert rep.ok and list(rep.faults_by_kind["optim_interrupt"]) == [12, 12], rep.summary()
    monkeypatch.setattr(optimizer_module, "InterruptsDeferred", _NoDeferral)
    rep = run(cfg)
    found = [f for f in rep.failures if "optim_interrupt" in f.message and
             ("partly" in f.message or "not as the uninterrupted twin" in f.message
              or "written after step() raised" in f.message)]
    assert found, rep.summary()
    assert "--faults optim_interrupt" in found[0].replay


def _gen_add_tree(ctx):
    """16 leaves summed by a balanced tree of adds: add's differentiable form passes the
    same gradient Tensor on to both inputs, so every leaf receives one Tensor."""
    level = [ctx.leaf((5,)) for _ in range(16)]
    while len(level) > 1:
        level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    return (pa.sin(level[0]) * 3.7).sum()


def test_create_graph_write_back_is_recorded_in_the_sequential_order(monkeypatch):
    """backward(create_graph=True) into leaves that hold a gradient: the parallel
    engine's `.grad` must be recorded as the sequential engine's, or the second order
    of `.grad` is not bitwise (16 leaves sharing one gradient Tensor: sums of 8 or so
    contributions in another order)."""
    monkeypatch.setattr(higher, "STRICT_WRITE_BACK", True)
    rep = run(quick(iterations=3, families=("add_tree",), create_graph=("add_tree",),
                    faults=(), threads=1, workers=(2,), variants=("queue",),
                    tracemalloc=False), families={"add_tree": _gen_add_tree})
    assert rep.counters.get("create_graph: graphs checked") == 3
    assert rep.ok, rep.summary()


class _KeepsRecordedGraphs(pa.Engine):
    """Keeps every create_graph gradient it returned (and so the graph it recorded)."""

    kept = []

    def grad(self, *args, create_graph=False, **kw):
        out = super().grad(*args, create_graph=create_graph, **kw)
        if create_graph:
            self.kept.append(out)
        return out


def test_detects_recorded_graphs_kept_alive():
    def factory(w, variant):
        return _KeepsRecordedGraphs(w, min_nodes=0, min_work=0, min_width=0,
                                    inline_below=0)

    try:
        rep = run(quick(iterations=1, families=("wide",), faults=(), threads=1,
                        workers=(2,), variants=("queue",), tracemalloc=False),
                  engine_factory=factory)
    finally:
        _KeepsRecordedGraphs.kept.clear()
    leaks = [f for f in rep.failures if f.kind == "leak"]
    assert leaks and "recorded nodes still alive" in leaks[0].message, rep.summary()
    assert rep.families["wide"].leaks >= 1


class _LeavesARecording(pa.Engine):
    """Leaves a create_graph pass's grad mode (a Recording) on the caller's thread."""

    def backward(self, *args, **kw):
        out = super().backward(*args, **kw)
        if kw.get("create_graph"):
            grad_mode_module._enabled.set(grad_mode_module.Recording((0, 0), []))
        return out


def test_detects_a_recording_left_as_the_callers_grad_mode():
    def factory(w, variant):
        return _LeavesARecording(w, min_nodes=0, min_work=0, min_width=0, inline_below=0)

    rep = run(quick(iterations=1, families=("wide",), faults=(), threads=1, workers=(2,),
                    variants=("queue",), tracemalloc=False), engine_factory=factory)
    leaks = [f for f in rep.failures if f.kind == "leak"]
    # (the Recording also keeps the nodes made after it alive: reported too)
    assert any("grad mode left as Recording" in f.message for f in leaks), rep.summary()
    assert grad_mode_module.grad_mode() is True


def test_cli_create_graph_options_and_replay():
    assert parse_args([]).create_graph == higher.CREATE_GRAPH_FAMILIES
    assert parse_args(["--no-create-graph"]).create_graph == ()
    assert parse_args(["--create-graph", "mlp,lstm"]).create_graph == ("mlp", "lstm")
    assert main(["--create-graph", "nope", "--iterations", "1", "--quiet"]) == 2
    from stress.harness import Harness
    h = Harness(quick(create_graph=("mlp",)))   # every family has the step by default
    assert "create-graph" not in h.replay_cmd("mlp", 3)
    assert "--no-create-graph" in h.replay_cmd("wide", 3)
    assert "--no-create-graph" in h.replay_cmd("cnn", 3)


# ---- calls with several roots -------------------------------------------------------------
def test_multi_root_step_draws_several_ready_roots_from_the_seed():
    """Besides the graph's root, 2-4 new roots over its interior nodes (nobody consumes
    them: ready), the same from the same seed on two builds of the graph; backward's
    roots are scalars; the sequential engine gives the same gradients on both builds."""
    for fam in graphs.FAMILIES:
        for seed in range(3):
            built = []
            for _ in range(2):
                case = graphs.build(fam, seed, 0.02)
                built.append((case, multiroot.make_roots(case, np.random.default_rng([seed, 8]))))
            (a, ra), (b, rb) = built
            assert ra is not None and len(ra.extra) >= 2 and len(ra.scalar) >= 3, fam
            assert any(r is a.root for r in ra.outputs)
            assert len(ra.outputs) == len(ra.grad_outputs)
            assert all(r.numel() == 1 for r in ra.scalar)
            fed = {n for r in ra.scalar for m in graphs.walk(r) for n in m.next_nodes}
            assert all(ra.scalar[j].grad_fn not in fed for j in ra.extra), fam
            assert [r.shape for r in ra.outputs] == [r.shape for r in rb.outputs]
            for (c, r) in built:
                c.got = list(pa.grad(r.outputs, c.grad_leaves, r.grad_outputs, retain_graph=True,
                                allow_unused=True))
                for t in c.leaves:
                    t.grad = None
                pa.backward(r.scalar)
                c.got += [t.grad for t in c.leaves]
            assert_bitwise(a.got, b.got, f"{fam} seed {seed}")


_real_run_to_completion = task_module.GraphTask.run_to_completion


def _run_to_completion_counting_late(self, ready):
    """Broken as before b35959a, with the race's window held open: the caller queues
    the other roots, lets the workers run them to their end (`outstanding` drops to 0,
    so the call is marked finished for good), and only then counts its own root: wait()
    returns while what its root made ready still runs on the workers."""
    pool = self.pool
    try:
        if ready:
            first = list(ready.pop())
            for item in ready:
                pool.submit(self, *item)
            if ready:
                end = time.monotonic() + 0.5
                while not self.finished and time.monotonic() < end:
                    time.sleep(0.0002)
            ready = None
            self.add_outstanding(1)
            self.run(first)
            first = None
            self.wait()
    except BaseException as e:
        self.fail(e)
        self.abandon()
        self.wait()
        raise
    if self.error is not None:
        raise self.error


def _run_to_completion_dropping_a_root(self, ready):
    """Broken: with several ready roots, the first is never run (nor counted)."""
    if len(ready) > 1:
        ready.pop(0)
    return _real_run_to_completion(self, ready)


MULTI_ROOT_RUN = dict(iterations=4, families=("shared", "wide", "random", "mlp"), faults=(),
                      threads=1, workers=(2,), variants=("queue",), tracemalloc=False,
                      create_graph=())


@pytest.mark.parametrize("broken", [_run_to_completion_counting_late,
                                    _run_to_completion_dropping_a_root],
                         ids=["finished-before-the-callers-root", "a-root-dropped"])
def test_detects_a_multi_root_call_finished_before_all_its_roots_ran(monkeypatch, broken):
    """The race fixed in b35959a (a call with several ready roots marked finished while a
    worker still ran one of them: its gradients lost), made deterministic, and an engine
    dropping one of several roots: only calls with several roots can see either, and the
    multi-root step reports them (wrong or missing gradients, or the error of a failing
    root lost). The real engine passes the same run, with calls of 3 or more ready roots."""
    seen = []

    def spy(self, ready):
        seen.append(len(ready))
        return _real_run_to_completion(self, ready)

    monkeypatch.setattr(task_module.GraphTask, "run_to_completion", spy)
    rep = run(quick(**MULTI_ROOT_RUN))
    assert rep.ok and max(seen) >= 3, (rep.summary(), seen)
    monkeypatch.setattr(task_module.GraphTask, "run_to_completion", broken)
    rep = run(quick(**MULTI_ROOT_RUN))
    found = [f for f in rep.failures if f.kind in ("mismatch", "lost-fault")]
    assert found and rep.total().mismatches + rep.total().errors > 0, rep.summary()
    assert all(f.message.startswith("multi-root ") for f in found), rep.summary()
    f = found[0]
    assert f.family in MULTI_ROOT_RUN["families"] and f"--replay {f.seed}" in f.replay
    assert not [f for f in rep.failures if f.kind == "hang"], rep.summary()


def test_multi_root_step_is_optional_and_runs_under_a_short_switch_interval(monkeypatch):
    """--multi-root 0 turns the step off; the step sets sys.setswitchinterval to
    multiroot.SWITCH_INTERVAL for its calls (--switch-interval: for the whole run) and puts
    the caller's back."""
    import sys
    assert parse_args([]).multi_root == Config.multi_root >= 1
    assert parse_args(["--multi-root", "0"]).multi_root == 0
    assert parse_args(["--switch-interval", "1e-6"]).switch_interval == 1e-6
    rep = run(quick(iterations=1, families=("mlp",), faults=(), threads=1, multi_root=0))
    assert rep.ok and "multi-root: graphs checked" not in rep.counters
    before = sys.getswitchinterval()
    inside = []
    real = multiroot._check

    def spy(h, mr):
        inside.append(sys.getswitchinterval())
        return real(h, mr)

    monkeypatch.setattr(multiroot, "_check", spy)
    run(quick(iterations=1, families=("mlp",), faults=(), threads=1))
    run(quick(iterations=1, families=("mlp",), faults=(), threads=1, switch_interval=1e-4))
    assert inside == [pytest.approx(multiroot.SWITCH_INTERVAL), pytest.approx(1e-4)]
    assert sys.getswitchinterval() == before
    from stress.harness import Harness
    assert "--multi-root 5" in Harness(quick(multi_root=5)).replay_cmd("mlp", 3)


# ---- watchdog, CLI and report ---------------------------------------------------------------
def test_watchdog_breaks_a_waiting_call_and_dumps_stacks():
    wd = Watchdog().start()
    try:
        g = wd.guard(0.2, "test")
        t0 = time.monotonic()
        with pytest.raises(HangDetected):
            with g:
                # A C-level wait, like the engine's: threading.Event.wait is Python code
                # that an asynchronous exception can cut half-way (its lock then fails).
                never = queue.SimpleQueue()
                while True:
                    try:
                        never.get(timeout=0.01)
                    except queue.Empty:
                        pass
        assert g.fired and time.monotonic() - t0 < 5
        assert "test_watchdog_breaks" in g.dump and "Threads:" in g.dump
        g2 = wd.guard(5.0, "fast")
        with g2:
            pass
        assert not g2.fired
    finally:
        wd.stop()


@pytest.mark.timeout(120)
def test_a_fired_guard_leaves_no_asynchronous_exception_pending():
    """A guard that fired drops its undelivered HangDetected by taking delivery of a stand-in:
    PyThreadState_SetAsyncExc(tid, NULL) left CPython 3.11's interpreter-wide flag set for
    good, after which any call under sys.settrace looped forever (the alloc_work kind, which
    counts lines with it, hung in the suite after a test that makes the watchdog fire)."""
    code = """if True:
        import sys, time
        from stress.watchdog import HangDetected, Watchdog
        wd = Watchdog().start()
        g = wd.guard(0.05, "t")
        try:
            with g:
                time.sleep(1.0)   # a C-level wait: HangDetected is delivered after it
        except HangDetected:
            pass
        assert g.fired
        wd.stop()
        sys.settrace(lambda *a: None)
        (lambda: 1)()
        sys.settrace(None)
        print("traced call returned")
    """
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=60, check=False)
    assert proc.stdout.strip() == "traced call returned", proc.stderr[-2000:]


def test_cli_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--duration", "--iterations", "--seed", "--workers", "--threads",
                "--families", "--faults", "--report", "--replay", "--on-hang"):
        assert opt in out


def test_cli_runs_quietly_in_ci_writes_report_and_exits_zero(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")
    path = tmp_path / "out.json"
    rc = main(["--profile", "quick", "--iterations", "2", "--families", "mlp,cnn",
               "--faults", "nan", "--threads", "2", "--checkpoint-every", "30",
               "--report", str(path)])
    cap = capsys.readouterr()
    assert rc == 0, cap.out
    assert "\r" not in cap.err and "\r" not in cap.out
    assert "family" in cap.out and "TOTAL" in cap.out and "PASS" in cap.out
    data = json.loads(path.read_text())
    assert data["ok"] and set(data["families"]) == {"mlp", "cnn"}
    assert data["faults"]["nan"]["injected"] >= 1


def test_cli_exits_nonzero_and_replay_reproduces_the_failure(monkeypatch, capsys):
    monkeypatch.setattr(strategy_module.Ranked, "contribute", _contribute_reversed)
    rc = main(["--profile", "quick", "--iterations", "3", "--families", "shared,wide",
               "--no-faults", "--threads", "1", "--workers", "2", "--seed", "5",
               "--no-tracemalloc", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out
    line = next(ln for ln in out.splitlines() if "replay: python -m stress" in ln)
    argv = shlex.split(line.split("replay: python -m stress", 1)[1])
    seed = int(argv[argv.index("--replay") + 1])
    assert seed // 1_000_000 == 5
    rc = main(argv + ["--quiet", "--no-tracemalloc"])
    out2 = capsys.readouterr().out
    assert rc == 1 and f"seed={seed}" in out2


def test_bad_arguments_are_rejected(capsys):
    assert main(["--families", "nope", "--iterations", "1", "--quiet"]) == 2
    assert main(["--faults", "bogus", "--iterations", "1", "--quiet"]) == 2


def test_regression_no_hang_on_shared_leaves_with_four_workers():
    """The harness found this graph hanging the engine of e715697 (about one call in
    a hundred): the ranked contribute overwrote `released` when a second batch of
    deferred items was released in the same loop, losing queued items, so the call
    never completed. Run it enough times to notice if that comes back."""
    case = graphs.build("shared", 3000015, 1.0)
    wd = Watchdog().start()
    eng = pa.Engine(4, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    try:
        from threadpoolctl import threadpool_limits
        with threadpool_limits(1, user_api="blas"):
            for i in range(120):
                g = wd.guard(10.0, f"call {i}")
                try:
                    with g:
                        eng.backward(case.root, case.seed_grad, retain_graph=True)
                except HangDetected:
                    pass
                assert not g.fired, f"call {i} hung:\n{g.dump}"
    finally:
        eng.close()
        wd.stop()


def test_regression_zero_d_leaf_grad_accumulates_across_calls():
    """Found by the harness (fixed in f9249dc): a 0-d leaf whose gradient was summed
    back from a broadcast got a numpy scalar as .grad, so the next backward into it
    raised TypeError 'cannot accumulate into it', in both engines."""
    x = pa.tensor(np.array(1.5, dtype=np.float32), requires_grad=True)
    w = pa.tensor(np.ones(3, dtype=np.float32))
    pa.backward((x * w).sum())
    assert isinstance(x.grad.numpy(), np.ndarray)
    pa.backward((x * w).sum())
    assert x.grad.shape == () and x.grad == 6.0


def test_regression_zero_d_leaf_replayed_by_the_harness():
    """The harness's own report of that bug: `python -m stress --replay 22 --families
    broadcast --threads 1 --profile quick --no-faults` (two backward calls into the same
    leaves)."""
    rep = run(quick(replay=22, families=("broadcast",), faults=(), threads=1,
                    tracemalloc=False))
    assert rep.ok, rep.summary()


# ---- random draws shared between threads (issue 25) -----------------------------------------
RNG_UNITS = dict(families=("random",), threads=1, workers=(2,), variants=("queue",),
                 tracemalloc=False, multi_root=0, create_graph=())


def _replay_from_the_segments_start(monkeypatch):
    """Broken as before issue 25: the segment keeps the current generator's state at
    its start and the recomputation draws from a copy of it, as if no other thread could
    draw from the generator during the forward."""
    import contextlib

    from parallel_autograd import random as pa_random

    @contextlib.contextmanager
    def record(draws):
        bits = pa_random.current_generator().bit_generator
        draws.append((type(bits), bits.state))
        yield draws

    def replay(draws):
        if not draws:
            return contextlib.nullcontext()
        kind, state = draws[0]
        g = np.random.Generator(kind(0))
        g.bit_generator.state = state
        return pa_random.generator_override(g)

    monkeypatch.setattr(pa_random, "record_draws", record)
    monkeypatch.setattr(pa_random, "replay_draws", replay)


def _note_the_state_outside_the_lock(monkeypatch):
    """Broken: the state is read, then the draw is made, without the generator's lock
    held across both: another thread's draw in between goes unnoticed."""
    from parallel_autograd import random as pa_random

    def noted(g, name, args, kwargs):
        state = g.bit_generator.state
        time.sleep(0.001)
        return getattr(g, name)(*args, **kwargs), (name, type(g.bit_generator), state)

    monkeypatch.setattr(pa_random, "_noted_draw", noted)


@pytest.mark.parametrize("broken", [_replay_from_the_segments_start,
                                    _note_the_state_outside_the_lock])
def test_detects_checkpoint_replays_shifted_by_another_threads_draws(monkeypatch, broken):
    broken(monkeypatch)
    rep = run(quick(iterations=3, faults=("checkpoint_rng",), **RNG_UNITS))
    found = [f for f in rep.failures if f.kind == "mismatch" and "checkpoint_rng" in f.message]
    assert found, rep.summary()
    assert "another thread drawing" in found[0].message  # only the busy check sees it
    assert "--faults checkpoint_rng" in found[0].replay


def test_detects_a_fork_child_hanging_on_the_default_generators_lock(monkeypatch):
    from parallel_autograd import random as pa_random
    monkeypatch.setattr(pa_random, "_after_fork_in_child", lambda: None)  # lock not renewed
    for seed in range(40):  # the first unit whose busy thread is drawing
        rep = run(quick(replay=seed, faults=("fork_busy",), deadline=2.0, **RNG_UNITS))
        if rep.counters.get("fork_busy: while drawing"):
            break
    else:
        pytest.fail("no fork_busy unit drew random numbers in 40 seeds")
    hangs = [f for f in rep.failures if f.kind == "hang"]
    assert hangs and "thread was drawing" in hangs[0].message, rep.summary()
