"""Fault injection: each kind arms two identical graphs the same way, runs the
sequential engine on one and a parallel engine on the other, and checks that the
fault surfaces the same way (right exception, or identical gradients), that no
.grad changed on failure, and that the engine keeps serving afterwards.

Kinds (`KINDS`, all on by default; `stall` is opt-in):

- node_error:  a random node's backward rule raises (an Exception, or a
               BaseException subclass) -> that exception, naming the op.
- hook_error:  a tensor hook on a random node/leaf raises, or returns the wrong
               shape -> that exception / ValueError.
- nan:         a hook replaces a random gradient by one with NaN/inf entries ->
               no error, gradients NaN-aware bitwise equal to sequential.
- reentrant:   a hook or rule calls backward/grad (same engine, backward_parallel,
               pa.grad, pa.backward) on a separate small graph -> inner and outer
               gradients exact.
- interrupt:   the caller is interrupted mid-call (SIGINT via _thread.interrupt_main
               when a worker runs the node and the caller is the main thread;
               KeyboardInterrupt raised directly otherwise) -> KeyboardInterrupt, and
               BLAS threads back right after the call (raised above the harness's pin
               for it: `leaks.RaisedBlas`).
- freed_graph: a second backward through a freed graph -> RuntimeError.
- stall:       a node sleeps past a short deadline -> the watchdog fires, dumps the
               stacks and breaks the call; the engine keeps serving (watchdog self-test).
- interrupt_commit, fork_busy, cross_close, memory: hazards of the process around a
               call (Ctrl+C in the write-back, fork from a busy process, engines closing
               each other, memory of large branches): see `stress.hazards`.
- checkpoint_rng: checkpointed dropout while another thread draws: see
               `stress.randomness`.
- optim_interrupt: Ctrl+C during a threaded optimizer step -> all or nothing, no write
               after step() raised: see `stress.optimsteps`.
- alloc_work:  the caching allocator's work per request (lines of Python run) at
               8-16x more blocks in use -> the same: see `stress.alloc`.

With create_graph (`CREATE_GRAPH_KINDS`, half the units of a family in
`Config.create_graph`) both sides run `backward`/`grad` with `create_graph=True`: a rule
then runs its differentiable form, so an injected rule gets one too (`patch_rule`);
results are Tensors, and the two sides' recorded graphs must be numbered alike.

Graph surgery (replacing a node's rule, appending to its hooks) touches only the
test's own graph objects, never the engine.
"""
from __future__ import annotations

import _thread
import signal
import threading
import time

import numpy as np

import parallel_autograd as pa
from parallel_autograd.node import next_seq
from parallel_autograd.ops.forms import graph_saved, no_graph_rule_message, run_formulas

from . import alloc, graphs, hazards, higher, leaks, optimsteps, randomness
from .checks import (INTERRUPT_TAG, Outcome, diff_all, leaf_diffs, make_priors,  # noqa: F401
                     set_grads, snapshot, unchanged)

KINDS = (("node_error", "hook_error", "nan", "reentrant", "interrupt", "freed_graph")
         + hazards.KINDS + randomness.KINDS + optimsteps.KINDS + alloc.KINDS)
OPT_IN = ("stall",)
ALL_KINDS = KINDS + OPT_IN
# kinds also run with create_graph=True (on the families in Config.create_graph), in
# this share of their units
CREATE_GRAPH_KINDS = ("node_error", "hook_error", "nan", "reentrant", "interrupt",
                      "freed_graph", "interrupt_commit")
CREATE_GRAPH_SHARE = 0.5


class StressFault(Exception):
    """Raised by an injected fault (an ordinary Exception)."""


class StressBaseFault(BaseException):
    """Raised by an injected fault that is not an Exception (like SystemExit)."""


# ---- graph surgery -------------------------------------------------------------------------
def fault_nodes(case, leaves_ok: bool):
    nodes = graphs.walk(case.root)
    if not leaves_ok:
        nodes = [n for n in nodes if n.variable is None]
    return nodes


def add_hook(node, fn):
    """Register `fn` on the tensor `node` produces (a leaf's or an intermediate's)."""
    if node.variable is not None:
        return node.variable.register_hook(fn).remove
    if node.pre_hooks is None:
        node.pre_hooks = []
    hooks = node.pre_hooks
    hooks.append(fn)
    return lambda: hooks.remove(fn) if fn in hooks else None


def original_rule(node):
    """The node's rule as a joint function `(g, *saved) -> tuple` (same arithmetic)."""
    vjps, kwargs, joint = node.vjps, node.kwargs or {}, node.joint
    if joint is not None:
        return (lambda g, *saved: joint(g, *saved, **kwargs)) if kwargs else joint

    def joint(g, *saved):
        return tuple(None if v is None else v(g, *saved, **kwargs) for v in vjps)

    return joint


def original_graph_rule(node):
    """The node's differentiable form as a joint one `(g, node) -> tuple` (what a
    create_graph pass runs: `forms.graph_grads`), raising its RuntimeError if it has none."""
    op = node.op
    if op is not None:  # a declared op: its formulas
        return lambda g, n: tuple(run_formulas(n, op, g))
    if node.joint is not None:
        form = getattr(node.joint, "graph", None)
        if form is not None:
            return form
    vjps, kwargs = node.vjps, node.kwargs or {}

    def form(g, n):
        if vjps is None:
            raise RuntimeError(no_graph_rule_message(n))
        out, saved = [], None
        for i, v in enumerate(vjps):
            if v is None or n.next_nodes[i] is None:
                out.append(None)
            elif getattr(v, "graph_node", None) is not None:
                out.append(v.graph_node(g, n))
            elif getattr(v, "graph", None) is None:
                raise RuntimeError(no_graph_rule_message(n))
            else:
                saved = graph_saved(n, len(vjps)) if saved is None else saved
                out.append(v.graph(g, *saved, **kwargs))
        return tuple(out)

    return form


def patch_rule(node, make):
    """Replace the node's rule by `make(original)`, and its differentiable form (what a
    create_graph pass runs instead) by the same `make` around the original form; returns
    the undo function."""
    old, op = node.joint, node.op
    new = make(original_rule(node))
    graph = original_graph_rule(node)
    in_graph = make(lambda g, *saved: graph(g, node))
    def joint(g, *saved, **_):  # the node's params are in original_rule's closure
        return new(g, *saved)

    joint.graph = lambda g, n: in_graph(g, *(n.saved or ()))
    node.joint = joint
    node.op = None  # the create_graph form is now the joint rule's `graph`

    def undo():
        node.joint, node.op = old, op

    return undo


# ---- running one side ------------------------------------------------------------------------
class Side:
    """One armed copy of the graph and how to call backward/grad on it."""

    def __init__(self, h, case, call, api, label):
        self.h = h
        self.case = case
        self.call = call        # engine-like: .backward / .grad
        self.api = api
        self.label = label
        self.undo = []
        self.fired = 0
        self.inputs = case.grad_leaves
        self.create_graph = False
        self.first_new = None  # next_seq() before the last call (create_graph)

    def run(self, retain_graph=True, deadline=None) -> Outcome:
        c = self.case
        kw = {"create_graph": True} if self.create_graph else {}
        if self.api == "grad":
            def fn():
                return self.call.grad([c.root], self.inputs, [c.seed_grad],
                                      retain_graph=retain_graph, allow_unused=True, **kw)
        else:
            def fn():
                return self.call.backward(c.root, c.seed_grad, retain_graph=retain_graph,
                                          **kw)
        self.first_new = next_seq()
        deadline = deadline or (higher.deadline_for(self.h, c) if self.create_graph
                                else self.h.deadline_for(c))
        return self.h.guarded(fn, deadline, self.label)

    def recorded(self, out, priors) -> list:
        """The graph the last create_graph call recorded (`higher.made_graph`), from
        its results (grad) or the leaves' `.grad` (backward)."""
        base = higher.base_index(self.case.root)
        if self.api == "grad":
            return higher.made_graph(out.value or (), self.first_new, base)[0]
        had = [p is not None for p in priors]
        return higher.write_back_graph(self.case.leaves, had, self.first_new, base)[0]

    def disarm(self):
        for u in reversed(self.undo):
            u()
        self.undo = []


class Sequential:
    """The sequential engine behind the same interface as an engine."""

    @staticmethod
    def backward(root, grad=None, retain_graph=False, create_graph=False):
        return pa.backward(root, grad, retain_graph=retain_graph, create_graph=create_graph)

    @staticmethod
    def grad(outputs, inputs, grad_outputs=None, retain_graph=False, allow_unused=False,
             create_graph=False):
        return pa.grad(outputs, inputs, grad_outputs, retain_graph, allow_unused,
                       create_graph=create_graph)


SEQUENTIAL = Sequential()


class FaultRun:
    """One fault unit: the same family/seed built twice (sequential and parallel)."""

    def __init__(self, h, family, seed, kind):
        self.h = h
        self.family = family
        self.seed = seed
        self.kind = kind
        self.rng = np.random.default_rng([seed, 3, ALL_KINDS.index(kind)])
        par = [w for w in h.cfg.workers if w > 1] or list(h.cfg.workers)
        self.workers = int(self.rng.choice(par))
        self.variant = str(self.rng.choice(list(h.cfg.variants)))
        self.engine = h.engine(self.workers, self.variant)
        self.api = "grad" if self.rng.random() < 0.3 else "backward"
        # its own stream: the draws above stay what they were before create_graph existed
        self.create_graph = (kind in CREATE_GRAPH_KINDS and family in h.cfg.create_graph
                             and np.random.default_rng([seed, 5]).random()
                             < CREATE_GRAPH_SHARE)
        self.failures = 0

    @property
    def where(self):
        return (f"fault:{self.kind} ({self.variant}, {self.workers} workers, {self.api}"
                f"{', create_graph' if self.create_graph else ''})")

    def build_pair(self):
        h = self.h
        scale = h.aux_scale * graphs.AUX_FACTOR.get(self.family, 1.0)
        a = graphs.build(self.family, self.seed, scale, families=h.gens)
        b = graphs.build(self.family, self.seed, scale, families=h.gens)
        priors = make_priors(a.leaves, np.random.default_rng([self.seed, 4]))
        set_grads(a.leaves, priors)
        set_grads(b.leaves, priors)
        self.priors = priors
        seq = Side(h, a, SEQUENTIAL, self.api, f"{self.family} seed={self.seed} sequential")
        par = Side(h, b, self.engine, self.api,
                   f"{self.family} seed={self.seed} {self.variant} x{self.workers}")
        seq.create_graph = par.create_graph = self.create_graph
        return seq, par

    def fail(self, kind, message, details=None):
        self.failures += 1
        self.h.fail(kind, self.family, self.seed, f"{self.where}: {message}", details,
                    fault=self.kind)

    def check_outcome(self, out, side, what):
        """Report a hang or an unexpected exception; True if the call was clean."""
        if out.hang:
            self.fail("hang", f"{what} exceeded its deadline", {"stacks": out.dump})
            return False
        if out.exc is not None:
            self.fail("error", f"{what} raised {type(out.exc).__name__}: {out.exc}",
                      {"exception": repr(out.exc)})
            return False
        return True

    def compare(self, seq, par, so, po, what) -> bool:
        """Bitwise (NaN-aware) comparison of the two sides' results."""
        problems = diff_all(so.value, po.value, "grad() result") if self.api == "grad" else []
        problems += leaf_diffs([t.grad for t in seq.case.leaves], par.case.leaves)
        if self.create_graph:
            problems += higher.graph_diff(seq.recorded(so, self.priors),
                                          par.recorded(po, self.priors), what)
        self.h.count_comparisons(self.family, len(seq.case.leaves), len(problems))
        if problems:
            self.fail("mismatch", f"{what}: {problems[0]}"
                      + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                      {"problems": problems[:20]})
            return False
        return True

    def keeps_serving(self, seq, par):
        """After the fault: disarmed, the same graph on the same engine matches."""
        seq.disarm()
        par.disarm()
        set_grads(seq.case.leaves, self.priors)
        set_grads(par.case.leaves, self.priors)
        so = seq.run(retain_graph=False)
        if not self.check_outcome(so, seq, "sequential re-run after the fault"):
            return False
        po = par.run(retain_graph=False)
        if not self.check_outcome(po, par, "engine re-run after the fault"):
            return False
        return self.compare(seq, par, so, po, "re-run after the fault")


# ---- the kinds --------------------------------------------------------------------------------
def _expect_error(fr, seq, par, so, po, expected_type, token):
    """Both sides must raise `expected_type` (carrying `token` if given), naming the
    failing op, and change no .grad. Returns True if the fault surfaced correctly."""
    ok = True
    for side, out, who in ((seq, so, "sequential"), (par, po, "engine")):
        if out.hang:
            fr.fail("hang", f"{who} call with the fault exceeded its deadline",
                    {"stacks": out.dump})
            ok = False
            continue
        e = out.exc
        if e is None:
            fr.fail("lost-fault", f"{who}: the injected {expected_type.__name__} was not "
                    f"raised (the call returned normally)")
            ok = False
            continue
        if not isinstance(e, expected_type) or (token and token not in str(e)):
            fr.fail("wrong-fault", f"{who}: expected {expected_type.__name__}({token!r}), "
                    f"got {type(e).__name__}: {e}", {"exception": repr(e)})
            ok = False
            continue
        problems = unchanged(side.case.leaves, side.before_objs, side.before_vals)
        if problems:
            fr.fail("mismatch", f"{who}: {problems[0]}", {"problems": problems[:20]})
            ok = False
    return ok


def _arm_both(fr, seq, par, arm):
    for side in (seq, par):
        arm(side)
        side.before_objs, side.before_vals = snapshot(side.case.leaves)


def run_node_error(fr):
    seq, par = fr.build_pair()
    nodes = fault_nodes(seq.case, leaves_ok=False)
    if not nodes:
        return None
    k = int(fr.rng.integers(len(nodes)))
    exc_type = StressBaseFault if fr.rng.random() < 0.25 else StressFault
    token = f"node-fault-{fr.seed}-{k}"

    def arm(side):
        node = fault_nodes(side.case, leaves_ok=False)[k]
        side.node_name = node.name

        def make(orig):
            def raiser(g, *saved):
                raise exc_type(token)
            return raiser

        side.undo.append(patch_rule(node, make))

    _arm_both(fr, seq, par, arm)
    so, po = seq.run(), par.run()
    ok = _expect_error(fr, seq, par, so, po, exc_type, token)
    if ok:
        op = getattr(po.exc, "autograd_op", None)
        if op != par.node_name:
            fr.fail("wrong-fault", f"engine: the exception names op {op!r}, expected "
                    f"{par.node_name!r}")
            ok = False
    return ok and fr.keeps_serving(seq, par)


def run_hook_error(fr):
    seq, par = fr.build_pair()
    nodes = fault_nodes(seq.case, leaves_ok=True)
    k = int(fr.rng.integers(len(nodes)))
    bad_shape = fr.rng.random() < 0.3
    token = f"hook-fault-{fr.seed}-{k}"

    def arm(side):
        node = fault_nodes(side.case, leaves_ok=True)[k]

        def hook(g):
            if bad_shape:
                return np.zeros(np.shape(g) + (2,), dtype=np.asarray(g).dtype)
            raise StressFault(token)

        side.undo.append(add_hook(node, hook))

    _arm_both(fr, seq, par, arm)
    so, po = seq.run(), par.run()
    ok = _expect_error(fr, seq, par, so, po, ValueError if bad_shape else StressFault,
                       None if bad_shape else token)
    return ok and fr.keeps_serving(seq, par)


def run_nan(fr):
    seq, par = fr.build_pair()
    nodes = fault_nodes(seq.case, leaves_ok=True)
    k = int(fr.rng.integers(len(nodes)))
    hseed = int(fr.rng.integers(2**31))

    def arm(side):
        node = fault_nodes(side.case, leaves_ok=True)[k]
        r = np.random.default_rng(hseed)

        def hook(g):
            # a create_graph pass hands hooks Tensors: a copy of the array
            g = np.array(g.numpy() if isinstance(g, pa.Tensor) else g, copy=True)
            if g.size:
                idx = r.integers(g.size, size=max(1, g.size // 7))
                vals = r.choice(np.array([np.nan, np.inf, -np.inf]), size=idx.size)
                g.reshape(-1)[idx] = vals.astype(g.dtype)
            return g

        side.undo.append(add_hook(node, hook))

    _arm_both(fr, seq, par, arm)
    with np.errstate(all="ignore"):
        so, po = seq.run(), par.run()
    if not (fr.check_outcome(so, seq, "sequential call with NaN/inf")
            and fr.check_outcome(po, par, "engine call with NaN/inf")):
        return False
    if not fr.compare(seq, par, so, po, "NaN/inf gradients"):
        return False
    with np.errstate(all="ignore"):
        return fr.keeps_serving(seq, par)


INNER_MODES = ("engine_backward", "engine_grad", "backward_parallel", "pa_grad",
               "pa_backward")


def run_reentrant(fr):
    seq, par = fr.build_pair()
    nodes = fault_nodes(seq.case, leaves_ok=True)
    k = int(fr.rng.integers(len(nodes)))
    mode = str(fr.rng.choice(INNER_MODES))
    in_rule = fr.rng.random() < 0.4 and nodes[k].variable is None
    inner = _Inner(mode, int(fr.rng.integers(2**31)), max(fr.h.cfg.workers), fr.engine)
    # in a create_graph pass, half the time the inner call is one too: its nodes are
    # handed to the outer pass's recording and numbered with it
    inner.create_graph = fr.create_graph and np.random.default_rng([fr.seed, 7]).random() < 0.5
    if inner.create_graph:
        mode += " (create_graph)"
        fr.h.report.notes_counter("create_graph: nested pass in a reentrant "
                                  + ("rule" if in_rule else "hook"))
    expected = inner.expected()

    def arm(side):
        run = inner.arm(side)
        node = fault_nodes(side.case, leaves_ok=True)[k]
        if in_rule:
            def make(orig):
                def rule(g, *saved):
                    run()
                    return orig(g, *saved)
                return rule
            side.undo.append(patch_rule(node, make))
        else:
            def hook(g):
                run()
            side.undo.append(add_hook(node, hook))

    _arm_both(fr, seq, par, arm)
    so, po = seq.run(), par.run()
    if not (fr.check_outcome(so, seq, f"sequential call with reentrant {mode}")
            and fr.check_outcome(po, par, f"engine call with reentrant {mode}")):
        return False
    if not fr.compare(seq, par, so, po, f"outer gradients with reentrant {mode}"):
        return False
    where = "rule" if in_rule else "hook"
    if not (_inner_ran_once(fr, seq, "sequential", mode, where, expected)
            and _inner_ran_once(fr, par, "engine", mode, where, expected)):
        return False
    if inner.create_graph:  # the nested pass's graph, numbered with the outer one's
        (ref, bad), (got, problems) = [higher.made_graph(_inner_got(side), side.first_new, {})
                                       for side in (seq, par)]
        problems = bad + problems + higher.graph_diff(ref, got, f"inner {mode} gradients")
        if problems:
            fr.fail("mismatch", problems[0])
            return False
    return fr.keeps_serving(seq, par)


def _inner_got(side):
    """The inner call's results: grad()'s, or the inner leaves' .grad."""
    return side.inner_results[0] if side.inner_results else \
        [t.grad for t in side.inner_leaves]


class _Inner:
    """The backward/grad call a reentrant hook or rule makes: `mode` (INNER_MODES) on
    a small random graph of its own (`seed`), built inside the outer call."""

    def __init__(self, mode, seed, workers, engine):
        self.mode, self.seed, self.workers, self.engine = mode, seed, workers, engine
        self.create_graph = False

    def expected(self):
        """The inner gradients, from a private copy on the sequential engine."""
        ref = graphs.build("random", self.seed, 0.02)
        cg = self.create_graph
        if self.mode in ("engine_grad", "pa_grad"):
            return pa.grad([ref.root], ref.grad_leaves, [ref.seed_grad], allow_unused=True,
                           create_graph=cg)
        pa.backward(ref.root, ref.seed_grad, create_graph=cg)
        return [t.grad for t in ref.grad_leaves]

    def arm(self, side):
        """The function the hook or rule calls on `side`: each call builds the inner
        graph over the side's own inner leaves, runs it, and counts in `side.fired`."""
        pool = {}
        graphs.build("random", self.seed, 0.02, shared=pool)  # the inner leaves
        side.inner_results = []

        def run():
            with pa.enable_grad():
                c = graphs.build("random", self.seed, 0.02, shared=pool)
            result = self.call(c)
            if result is not None:
                side.inner_results.append(result)
            side.fired += 1
            side.inner_leaves = c.grad_leaves

        return run

    def call(self, c):
        """Run the inner call on graph `c`: grad()'s results, or None for backward."""
        mode, engine = self.mode, self.engine
        kw = {"create_graph": True} if self.create_graph else {}
        if mode == "engine_backward":
            engine.backward(c.root, c.seed_grad, **kw)
        elif mode == "backward_parallel":
            pa.backward_parallel(c.root, c.seed_grad, num_workers=self.workers, **kw)
        elif mode == "pa_backward":
            pa.backward(c.root, c.seed_grad, **kw)
        elif mode == "engine_grad":
            return engine.grad([c.root], c.grad_leaves, [c.seed_grad], allow_unused=True,
                               **kw)
        else:
            return pa.grad([c.root], c.grad_leaves, [c.seed_grad], allow_unused=True, **kw)
        return None


def _inner_ran_once(fr, side, who, mode, where, expected) -> bool:
    """The reentrant hook or rule (`where`) ran once on `side` and its inner call's
    gradients are bitwise the expected ones; False after reporting otherwise."""
    if side.fired != 1:
        fr.fail("wrong-fault", f"{who}: the reentrant {where} ran {side.fired} times, "
                f"expected once")
        return False
    problems = diff_all(expected, _inner_got(side), f"inner {mode} gradient")
    if problems:
        fr.fail("mismatch", f"{who}: {problems[0]}")
        return False
    return True


def run_interrupt(fr):
    seq, par = fr.build_pair()
    nodes = fault_nodes(seq.case, leaves_ok=True)
    k = int(fr.rng.integers(len(nodes)))
    main = threading.main_thread()
    use_signal = (threading.current_thread() is main
                  and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    state = {"armed": False}
    delivered = threading.Event()

    def on_sigint(signum, frame):
        if state["armed"]:
            state["armed"] = False
            delivered.set()
            raise KeyboardInterrupt(f"{INTERRUPT_TAG} (SIGINT)")

    def arm(side):
        node = fault_nodes(side.case, leaves_ok=True)[k]
        side.caller = threading.get_ident()
        side.via = None

        def hook(g):
            on_caller = threading.get_ident() == side.caller
            if not use_signal or side is seq:
                side.via = "raise on " + ("caller" if on_caller else "worker")
                raise KeyboardInterrupt(f"{INTERRUPT_TAG} (hook)")
            side.via = "SIGINT from " + ("caller" if on_caller else "worker")
            _thread.interrupt_main()  # SIGINT for the caller (the main thread), mid-call
            if on_caller:  # delivered at the main thread's next bytecode boundary
                end = time.monotonic() + 5.0
                while not delivered.is_set() and time.monotonic() < end:
                    pass
            else:
                delivered.wait(5.0)

        side.undo.append(add_hook(node, hook))

    _arm_both(fr, seq, par, arm)
    so = seq.run()
    old = signal.signal(signal.SIGINT, on_sigint) if use_signal else None
    # BLAS above the harness's pin for the interrupted call, checked right after it
    with leaks.RaisedBlas(fr) as raised:
        try:
            delivered.clear()
            state["armed"] = True
            po = par.run()
            state["armed"] = False
            for _ in range(1000):  # let a still-pending SIGINT reach our (now inert) handler
                pass
            time.sleep(0.001)
        finally:
            state["armed"] = False
            if use_signal:
                signal.signal(signal.SIGINT, old)
        blas_ok = raised.check(f"a call interrupted by {par.via or 'nothing'}")
    fr.h.report.notes_counter(f"interrupt: {par.via or 'hook not reached'}")
    ok = _expect_error(fr, seq, par, so, po, KeyboardInterrupt, INTERRUPT_TAG)
    return ok and blas_ok and fr.keeps_serving(seq, par)


def run_freed_graph(fr):
    seq, par = fr.build_pair()
    so = seq.run(retain_graph=False)
    po = par.run(retain_graph=False)
    if not (fr.check_outcome(so, seq, "sequential first call")
            and fr.check_outcome(po, par, "engine first call")):
        return False
    if not fr.compare(seq, par, so, po, "first call (graph freed after)"):
        return False
    for side in (seq, par):
        side.before_objs, side.before_vals = snapshot(side.case.leaves)
    so2, po2 = seq.run(retain_graph=False), par.run(retain_graph=False)
    ok = _expect_error(fr, seq, par, so2, po2, RuntimeError, "second time")
    if not ok:
        return False
    # keeps serving: a fresh graph on the same engine
    seq2, par2 = fr.build_pair()
    so, po = seq2.run(retain_graph=False), par2.run(retain_graph=False)
    return (fr.check_outcome(so, seq2, "sequential call after the fault")
            and fr.check_outcome(po, par2, "engine call after the fault")
            and fr.compare(seq2, par2, so, po, "fresh graph after the fault"))


def run_stall(fr):
    h = fr.h
    seq, par = fr.build_pair()
    nodes = fault_nodes(par.case, leaves_ok=False)
    if not nodes:
        return None
    k = int(fr.rng.integers(len(nodes)))
    deadline = h.cfg.stall_deadline
    done = threading.Event()

    def make(orig):
        def rule(g, *saved):
            try:
                time.sleep(deadline * 3)
            finally:
                done.set()
            return orig(g, *saved)
        return rule

    par.undo.append(patch_rule(fault_nodes(par.case, leaves_ok=False)[k], make))
    par.before_objs, par.before_vals = snapshot(par.case.leaves)
    po = par.run(deadline=deadline)
    done.wait(deadline * 4)  # let the sleeping rule finish before going on
    if not po.hang:
        fr.fail("lost-fault", f"the watchdog did not fire for a node sleeping "
                f"{deadline * 3:.2f}s past a {deadline:.2f}s deadline ({po.describe()})")
        return False
    if not po.dump or "Thread" not in po.dump:
        fr.fail("wrong-fault", "the watchdog fired without a stack dump")
        return False
    # Broken by the watchdog: a failed call, nothing committed. Not broken (the rule
    # ran on the caller, which never waited, e.g. the sequential fallback): it just
    # finished late, and the re-run below checks the results.
    h.report.notes_counter("stall: call " + ("broken by the watchdog" if po.broken
                                             else "finished late"))
    if po.broken:
        problems = unchanged(par.case.leaves, par.before_objs, par.before_vals)
        if problems:
            fr.fail("mismatch", f"engine: {problems[0]}", {"problems": problems[:20]})
            return False
    return fr.keeps_serving(seq, par)


RUNNERS = {
    "node_error": run_node_error,
    "hook_error": run_hook_error,
    "nan": run_nan,
    "reentrant": run_reentrant,
    "interrupt": run_interrupt,
    "freed_graph": run_freed_graph,
    "stall": run_stall,
    **hazards.RUNNERS,
    **randomness.RUNNERS,
    **optimsteps.RUNNERS,
    **alloc.RUNNERS,
}


def run_fault(h, family, seed, kind):
    """Inject one fault of `kind` into graph `seed` of `family`; count and check it."""
    fr = FaultRun(h, family, seed, kind)
    try:
        surfaced = RUNNERS[kind](fr)
    except KeyboardInterrupt as e:
        if INTERRUPT_TAG in str(e):
            fr.fail("error", f"an injected interrupt escaped the call: {e!r}")
            surfaced = False
        else:
            raise
    if surfaced is None:  # nothing to inject into (e.g. a graph of leaves only)
        return
    h.report.fault(kind, bool(surfaced) and fr.failures == 0, family)
    if fr.create_graph:
        h.report.notes_counter(f"create_graph: fault {kind}")
