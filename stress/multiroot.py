"""Calls with several roots: the multi-root step of a unit.

Every other check backpropagates from one root, so a parallel call there never starts
with more than one ready root. With several (`pa.grad([out1, out2, out3], inputs)`,
`engine.backward([l1, l2])`) the caller runs one root and queues the others before it
waits, and the call must not be finished by a worker ending a queued root before the
caller counted its own (fixed in b35959a: the call returned early, that root's gradients
lost, ~1 call in 13,000).

`check_multi_root` builds one graph of the unit's family (half the concurrency/fault
size: the race sits at the start of a call, so many small calls find it sooner) and adds
2-4 roots to the graph's own, each drawn from the seed: a sum of 1-3 interior nodes or
leaves found with `graphs.walk` (each times a constant), or one of them times a constant
array (a non-scalar output with its own `grad_outputs` entry). Those are new nodes
nobody consumes: ready roots. Now and then a root is repeated (two seeds into one node)
and `grad()` also seeds an interior node directly (a root that is not ready). The roots'
order is shuffled, so the graph's own root is queued or kept by the caller. Then,
against the sequential engine, bitwise (`diff`):

- on one parallel target, a `node_error` in one extra root's own node: `backward` and
  `grad()` on both engines raise it, naming the op, and no `.grad` changes (the other
  roots' gradients must not be committed: all or nothing);
- on every engine target, `Config.multi_root` times (once with one worker):
  `grad(roots, inputs, grad_outputs)` with inputs drawn from the leaves, marked
  intermediates and the interior nodes the roots use, and `backward(roots)` into leaves
  whose `.grad` starts out None or holding an array (`backward` takes scalar roots
  without seed gradients: a root with one is `(root * seed).sum()`). The last target's
  last backward frees the graph.

The step's calls run under `sys.setswitchinterval(SWITCH_INTERVAL)`: with the GIL's default
5 ms a worker seldom runs inside a window of a few bytecodes of the caller.
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np

import parallel_autograd as pa

from . import graphs
from .checks import (diff_all, leaf_diffs, make_priors, set_grads, snapshot, underlying,
                     unchanged)

EXTRA_ROOTS = (2, 4)     # extra roots per graph, besides the graph's own
MAX_TERMS = 3            # interior nodes summed into one scalar extra root
P_VECTOR = 0.35          # an extra root is one node times a constant array (non-scalar)
P_REPEAT = 0.15          # a root appears twice (two seeds into one node)
P_SEED_INTERIOR = 0.3    # grad() also seeds an interior node (a root that is not ready)
# graph size, relative to the concurrency/fault graphs'
SCALE = 0.5
SCALE_BY_FAMILY = {"deep": 0.25}
# sys.setswitchinterval during the step (unless Config.switch_interval sets one for the
# run; None: leave it). With b35959a's fix reverted (quick profile, workers 2 and 4, 60 s):
# 148 catches in 16,560 parallel multi-root calls at 1e-6, 1 in 20,840 at the default 5 ms.
SWITCH_INTERVAL = 1e-6


def output_meta(nodes) -> dict:
    """node -> (shape, dtype) of its output, from the input metadata of a node it feeds
    (every node of `graphs.walk(root)` but the root's feeds one)."""
    meta = {}
    for n in nodes:
        for nxt, m in zip(n.next_nodes, n.input_meta):
            if nxt is not None and m is not None and nxt not in meta:
                meta[nxt] = m
    return meta


def handle(node, meta):
    """A tensor for `node`'s output: the leaf for a leaf's accumulator, else a tensor
    whose grad_fn is the node. Its values are zeros: the ops the harness applies to it
    (times a constant, sum) need only its shape for their gradients."""
    if node.variable is not None:
        return node.variable
    shape, dtype = meta
    return pa.Tensor._wrap(np.zeros(shape, dtype), grad_fn=node)


@dataclasses.dataclass
class Roots:
    """One graph's roots: what `grad()` and `backward()` get."""
    outputs: list         # grad()'s outputs
    grad_outputs: list    # one seed gradient (array or None) per output
    scalar: list          # backward()'s roots: scalars, seeded with ones
    extra: list           # indices in `scalar` of the roots added to the graph's own
    terms: list           # per root: the tensors it was built on ([] for the graph's own)
    handles: list         # the interior nodes' tensors the extra roots use


def make_roots(case, rng) -> Roots | None:
    """The graph's root plus 2-4 ready roots over its interior nodes (module docstring),
    or None if the graph has no node besides its root."""
    nodes = graphs.walk(case.root)
    meta = output_meta(nodes)
    cand = [n for n in nodes if n in meta and n is not case.root.grad_fn]
    if not cand:
        return None
    handles = {}

    def pick():
        n = cand[int(rng.integers(len(cand)))]
        if n not in handles:
            handles[n] = handle(n, meta[n])
        return handles[n]

    def const(t):
        return np.asarray(rng.uniform(0.5, 1.5, t.shape), dtype=t.dtype)

    roots = [(case.root, case.seed_grad, [])]
    for _ in range(int(rng.integers(EXTRA_ROOTS[0], EXTRA_ROOTS[1] + 1))):
        if rng.random() < P_VECTOR:
            terms = [pick()]
            out = terms[0] * const(terms[0])
            seed = np.asarray(rng.standard_normal(out.shape), dtype=out.dtype)
        else:
            terms = [pick() for _ in range(int(rng.integers(1, MAX_TERMS + 1)))]
            out = None
            for t in terms:
                term = (t * const(t)).sum()
                out = term if out is None else out + term
            seed = None if rng.random() < 0.5 else \
                np.asarray(rng.standard_normal(()), dtype=out.dtype)
        roots.append((out, seed, terms))
    if rng.random() < P_REPEAT:
        roots.append(roots[1 + int(rng.integers(len(roots) - 1))])
    order = rng.permutation(len(roots))
    roots = [roots[i] for i in order]
    scalar = [r if r.numel() == 1 and s is None else (r * s).sum() for r, s, _ in roots]
    extra = [i for i, (_, _, terms) in enumerate(roots) if terms]
    outputs = [r for r, _, _ in roots]
    grad_outputs = [s for _, s, _ in roots]
    inner = [t for n, t in handles.items() if n.variable is None]
    if inner and rng.random() < P_SEED_INTERIOR:
        t = inner[int(rng.integers(len(inner)))]
        outputs.append(t)
        grad_outputs.append(np.asarray(rng.standard_normal(t.shape), dtype=t.dtype))
    return Roots(outputs, grad_outputs, scalar, extra, [t for _, _, t in roots],
                 list(handles.values()))


class _MultiRoot:
    """One multi-root unit's graph, roots, and sequential references."""

    def __init__(self, h, family, seed):
        self.h, self.family, self.seed = h, family, seed
        self.rng = np.random.default_rng([seed, 8])
        scale = h.aux_scale * graphs.AUX_FACTOR.get(family, 1.0) * \
            SCALE_BY_FAMILY.get(family, SCALE)
        self.case = graphs.build(family, seed, scale, families=h.gens)
        st = h.report.fam(family)
        st.graphs += 1
        st.nodes += self.case.nodes
        self.roots = make_roots(self.case, self.rng)
        if self.roots is None:
            return
        leaves = self.case.grad_leaves
        cand = leaves + self.case.extras + \
            [t for t in self.roots.handles if t.grad_fn is not None]
        pick = self.rng.random(len(cand)) < 0.5
        self.inputs = [t for t, p in zip(cand, pick) if p] or cand[:1]
        self.priors = make_priors(self.case.leaves, self.rng)
        n = len(self.roots.scalar)
        self.what_b = f"backward ({n} roots)"
        self.what_g = f"grad() ({len(self.roots.outputs)} outputs)"
        self.label = f"{family} seed={seed} multi-root"
        self.deadline = h.deadline_for(self.case) * 2
        h.report.notes_counter("multi-root: graphs checked")

    @property
    def leaves(self):
        return self.case.leaves

    def backward(self, call, retain_graph=True):
        return lambda: call.backward(self.roots.scalar, retain_graph=retain_graph)

    def grad(self, call, inputs=None):
        r = self.roots
        inputs = self.inputs if inputs is None else inputs
        return lambda: call.grad(r.outputs, inputs, r.grad_outputs, retain_graph=True,
                                 allow_unused=True)

    def call(self, fn, what):
        """`fn()` guarded; its Outcome, or None after reporting a hang or an error."""
        out = self.h.guarded(fn, self.deadline, f"{self.label} {what}")
        return out if self.h._clean(out, self.family, self.seed, f"multi-root {what}") \
            else None

    def mismatch(self, what, n, problems):
        self.h._mismatch(self.family, self.seed, f"multi-root {what}", n, problems)

    def counted(self, eng):
        """Count a call that ran in parallel (the engine's last call's stats)."""
        inner = underlying(eng)
        st = None if inner is None else inner.last_stats
        if st is not None and st.mode == "parallel":
            self.h.report.notes_counter("multi-root: parallel calls")


def check_multi_root(h, family, seed):
    """The multi-root step of a unit (module docstring), under `SWITCH_INTERVAL`."""
    mr = _MultiRoot(h, family, seed)
    if mr.roots is None:
        return
    before = sys.getswitchinterval()
    if not h.cfg.switch_interval and SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        _check(h, mr)
    finally:
        sys.setswitchinterval(before)
        set_grads(mr.leaves, [None] * len(mr.leaves))


def _check(h, mr):
    """The sequential references, the failing root, then every target's calls."""
    from .faults import SEQUENTIAL
    set_grads(mr.leaves, mr.priors)
    if mr.call(mr.backward(SEQUENTIAL), f"sequential {mr.what_b}") is None:
        return
    ref = [None if t.grad is None else np.array(t.grad, copy=True) for t in mr.leaves]
    out = mr.call(mr.grad(SEQUENTIAL), f"sequential {mr.what_g}")
    if out is None:
        return
    ref_grad = out.value
    targets = h.targets(mr.rng, mr.case.nodes)
    par = [i for i, (w, _) in enumerate(targets) if w > 1] or list(range(len(targets)))
    k = par[int(mr.rng.integers(len(par)))]
    w, variant = targets[k]
    if not _check_failing_root(mr, h.engine(w, variant), f"{variant} x{w}"):
        return
    reps = max(1, h.cfg.multi_root)
    for i, (w, variant) in enumerate(targets):
        eng, who = h.engine(w, variant), f"{variant} x{w}"
        for r in range(1 if w == 1 else reps):
            if h.stop_reason:
                return
            out = mr.call(mr.grad(eng), f"{who} {mr.what_g}")
            if out is not None:
                mr.counted(eng)
                mr.mismatch(f"{who} {mr.what_g}", len(mr.inputs),
                            diff_all(ref_grad, out.value, "grad() input"))
            final = i == len(targets) - 1 and r == (0 if w == 1 else reps - 1)
            set_grads(mr.leaves, mr.priors)
            if mr.call(mr.backward(eng, retain_graph=not final), f"{who} {mr.what_b}"):
                mr.counted(eng)
                mr.mismatch(f"{who} {mr.what_b}", len(mr.leaves), leaf_diffs(ref, mr.leaves))


def _check_failing_root(mr, eng, who) -> bool:
    """A node_error in one extra root's own node: backward and grad() raise it on the
    sequential engine and on `eng`, naming the op, with every `.grad` untouched (the
    other roots' gradients are not committed). False after a report."""
    from .faults import SEQUENTIAL, StressBaseFault, StressFault, patch_rule
    h, rng, r = mr.h, mr.rng, mr.roots
    j = r.extra[int(rng.integers(len(r.extra)))]
    node = r.outputs[j].grad_fn  # on backward's path (scalar[j]) and on grad()'s
    inputs = r.terms[j]  # grad() prunes: these make the failing node run
    exc_type = StressBaseFault if rng.random() < 0.25 else StressFault
    token = f"multi-root-fault-{mr.seed}-{j}"

    def make(orig):
        def raiser(g, *saved):
            raise exc_type(token)
        return raiser

    undo = patch_rule(node, make)
    ok = True
    try:
        for call, name in ((SEQUENTIAL, "sequential"), (eng, who)):
            for what, fn in ((mr.what_b, mr.backward(call)),
                             (mr.what_g, mr.grad(call, inputs))):
                set_grads(mr.leaves, mr.priors)
                objs, vals = snapshot(mr.leaves)
                out = h.guarded(fn, mr.deadline, f"{mr.label} {name} {what}, root {j} fails")
                where = f"multi-root {name} {what}, root {j}'s node {node.name} failing"
                problem = None
                if out.hang:
                    h.fail("hang", mr.family, mr.seed, f"{where}: exceeded its deadline",
                           {"stacks": out.dump})
                    return False
                if out.exc is None:
                    h.fail("lost-fault", mr.family, mr.seed,
                           f"{where}: the injected {exc_type.__name__} was not raised")
                    return False
                if not isinstance(out.exc, exc_type) or token not in str(out.exc):
                    problem = f"raised {type(out.exc).__name__}: {out.exc}"
                elif getattr(out.exc, "autograd_op", None) != node.name:
                    problem = (f"the exception names op "
                               f"{getattr(out.exc, 'autograd_op', None)!r}")
                if problem:
                    h.fail("wrong-fault", mr.family, mr.seed, f"{where}: {problem}",
                           {"exception": repr(out.exc)})
                    ok = False
                problems = unchanged(mr.leaves, objs, vals)
                h.count_comparisons(mr.family, len(mr.leaves), len(problems))
                if problems:
                    h.fail("mismatch", mr.family, mr.seed, f"{where}: {problems[0]}"
                           + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                           {"problems": problems[:20]})
                    ok = False
    finally:
        undo()
    if ok:
        h.report.notes_counter("multi-root: failing root surfaced")
    return ok
