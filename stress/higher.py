"""Higher-order gradients: the `create_graph` step of a unit.

A create_graph pass runs each node's rule in its differentiable form and records the
graph of the gradients it computes (parallel_autograd/engine/graph.py). The parallel
engine must return the sequential engine's gradients bit for bit, *and* record the same
graph numbered the same way, or differentiating that graph again would sum in another
order. `check_create_graph` builds one graph of the unit's family (the concurrency and
fault checks' size) and, against the sequential engine:

- `grad(create_graph=True)` on every engine target: the gradients bitwise, and the
  recorded graph the same (`made_graph`: every node the pass made, in creation order,
  with its inputs);
- on one parallel target (drawn from the seed): a second-order quantity (the gradient
  of the sum of the squared gradients) from its graph, bitwise, computed by the
  sequential engine and by the target's; and `backward(create_graph=True)` into leaves
  whose `.grad` starts out None or holding an array: `.grad` becomes a Tensor, bitwise
  the sequential engine's, its graph the same;
- every node those passes recorded is freed once the gradients are dropped.

Only the families in `CREATE_GRAPH_FAMILIES` run it: the others' graphs contain an op
whose rule has no differentiable form yet (the pass raises RuntimeError "create_graph: <op>
has no differentiable backward"). Widen the list as ops get theirs.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np

import parallel_autograd as pa
from parallel_autograd.node import next_seq

from . import graphs
from .checks import diff_all, make_priors, set_grads

RECORDING_COST = 10  # a create_graph pass's time per node, in plain passes (deadlines)

# The `.grad + g` sums of backward(create_graph=True) into leaves that hold a gradient are
# made in backward order (engine/step.py `_write_graph_grads`), so both engines record them
# alike: compared as a graph, and the second order of `.grad` checked bitwise. (False:
# compared leaf by leaf, no second order; it was needed until that order was fixed.)
STRICT_WRITE_BACK = True

# Families every graph of which has a differentiable form for each rule (all of them).
CREATE_GRAPH_FAMILIES = ("random", "wide", "deep", "diamond", "shared", "broadcast", "lstm",
                         "partial", "mlp", "cnn", "transformer")


def deadline_for(h, case) -> float:
    """The watchdog's deadline for a create_graph call on `case` (or on its gradients)."""
    return h.cfg.deadline + case.nodes * h.cfg.deadline_per_node * RECORDING_COST


def made_graph(tensors, first_new: int, base: dict) -> tuple[list, list]:
    """The nodes a create_graph pass made (seq >= `first_new`) reachable from `tensors`,
    in creation order, each as (name, its inputs: the rank of a made node, `#i` for node
    i of the original graph (`base`: node -> index), else the node's name), then each
    tensor's node: equal lists mean the same graph numbered the same way, with the same
    node behind each result. Also the problems with that order: a made node numbered
    before one of its inputs (not a valid creation order)."""
    fns = [t.grad_fn if isinstance(t, pa.Tensor) else None for t in tensors]
    graph, problems, name = node_graph(fns, first_new, base)
    return graph + [("result", name(f)) for f in fns], problems


def grad_fns(tensors) -> list:
    return [t.grad_fn for t in tensors if isinstance(t, pa.Tensor)]


def recorded_nodes(roots, first_new: int) -> list:
    """The nodes made since `first_new` reachable from the nodes `roots` (None skipped)
    through such nodes, in creation order."""
    made, stack = set(), [n for n in roots if n is not None]
    while stack:
        node = stack.pop()
        if node in made or node.seq < first_new:
            continue
        made.add(node)
        stack.extend(n for n in node.next_nodes if n is not None)
    return sorted(made, key=lambda n: n.seq)


def node_graph(roots, first_new: int, base: dict):
    """`made_graph` from nodes (None skipped); also the function naming a node as the
    graph's entries do."""
    order = recorded_nodes(roots, first_new)
    rank = {n: i for i, n in enumerate(order)}

    def name(m):
        if m is None:
            return None
        if m in rank:
            return rank[m]
        i = base.get(m)
        return m.name if i is None else f"#{i}"

    out, problems = [], []
    for i, n in enumerate(order):
        ins = tuple(name(m) for m in n.next_nodes)
        late = [r for r in ins if isinstance(r, int) and r >= i]
        if late and len(problems) < 5:
            problems.append(f"recorded node {i} ({n.name}) is numbered before its input "
                            f"{late[0]} ({order[late[0]].name})")
        out.append((n.name, ins))
    return out, problems, name


def write_back_graph(leaves, had, first_new: int, base: dict) -> tuple[list, list]:
    """`made_graph` of the leaves' `.grad` after `backward(create_graph=True)`, where
    `had[j]` says leaf j held a gradient before. Unless STRICT_WRITE_BACK, the recorded
    sums `add(old, g)` that became such leaves' `.grad` are taken leaf by leaf: the graph
    is the pass's, then per leaf its `.grad`'s node, or the sum and its inputs."""
    fns = [t.grad.grad_fn if isinstance(t.grad, pa.Tensor) else None for t in leaves]
    sums = [f is not None and h and f.name == "add" and f.seq >= first_new
            and not STRICT_WRITE_BACK for f, h in zip(fns, had)]
    roots = [n for f, s in zip(fns, sums) for n in (f.next_nodes if s else (f,))]
    graph, problems, name = node_graph(roots, first_new, base)
    per_leaf = [("leaf", f.name, tuple(name(m) for m in f.next_nodes)) if s
                else ("leaf", name(f)) for f, s in zip(fns, sums)]
    return graph + per_leaf, problems


def graph_diff(ref: list, got: list, what: str) -> list:
    """[] when two `made_graph` lists are equal, else the first difference."""
    if ref == got:
        return []
    for k, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            return [f"{what}: recorded graph differs at node {k} of {len(ref)}: expected "
                    f"{a}, got {b}"]
    return [f"{what}: recorded graph has {len(got)} nodes, expected {len(ref)}"]


def base_index(root) -> dict:
    """node -> its index in the original graph (creation order): names the older nodes
    a recorded graph points into, the same on two copies of one graph."""
    return {n: i for i, n in enumerate(graphs.walk(root))}


def not_tensors(xs, what) -> list:
    """Problems if a result of a create_graph pass is an array, not a Tensor."""
    return [f"{what} {j}: a {type(x).__name__}, not a Tensor"
            for j, x in enumerate(xs) if x is not None and not isinstance(x, pa.Tensor)]


def penalty(grads):
    """sum_i (g_i * g_i).sum() over the gradients that carry a graph (None: none does)."""
    total = None
    for g in grads:
        if isinstance(g, pa.Tensor) and g.requires_grad:
            term = (g * g).sum()
            total = term if total is None else total + term
    return total


def made_nodes(tensors, first_new: int) -> list:
    """Weak references to every node made since `first_new` reachable from `tensors`."""
    return [weakref.ref(n) for n in recorded_nodes(grad_fns(tensors), first_new)]


class _Pass:
    """One create_graph unit's state: the graph and the sequential references."""

    def __init__(self, h, family, seed):
        self.h, self.family, self.seed = h, family, seed
        self.rng = np.random.default_rng([seed, 6])
        scale = h.aux_scale * graphs.AUX_FACTOR.get(family, 1.0)
        self.case = graphs.build(family, seed, scale, families=h.gens)
        st = h.report.fam(family)
        st.graphs += 1
        st.nodes += self.case.nodes
        cand = self.case.grad_leaves + self.case.extras
        pick = self.rng.random(len(cand)) < 0.5
        self.inputs = [t for t, p in zip(cand, pick) if p] or cand[:1]
        self.priors = make_priors(self.case.leaves, self.rng)
        self.base = base_index(self.case.root)
        self.label = f"{family} seed={seed} create_graph"
        self.deadline = deadline_for(h, self.case)
        h.report.notes_counter("create_graph: graphs checked")
        self.refs = []  # weak references to every node the passes recorded

    def call(self, fn, what):
        """`fn()` guarded; (value, first seq it could make) or None after a report."""
        first = next_seq()
        out = self.h.guarded(fn, self.deadline, f"{self.label} {what}")
        if not self.h._clean(out, self.family, self.seed, f"create_graph {what}"):
            return None
        return out.value, first

    def mismatch(self, what, n, problems):
        self.h._mismatch(self.family, self.seed, f"create_graph {what}", n, problems)
        return not problems

    def grad(self, call):
        c = self.case
        return lambda: call.grad([c.root], self.inputs, [c.seed_grad], retain_graph=True,
                                 allow_unused=True, create_graph=True)

    def second_order(self, grads, call, what):
        """The second-order quantity: d penalty(grads) / d leaves, on `call`'s engine;
        None when no gradient carries a graph (nothing to differentiate), False after a
        failed call (reported)."""
        p = penalty(grads)
        if p is None:
            return None
        leaves = self.case.grad_leaves
        got = self.call(lambda: call.grad([p], leaves, None, retain_graph=True,
                                          allow_unused=True), what)
        return False if got is None else got[0]

    def check_second(self, grads, eng, who, ref, what) -> bool:
        """The second order of `grads` (which `eng` computed) on the sequential engine
        and on `eng`, bitwise `ref`; False if a call failed."""
        from .faults import SEQUENTIAL
        for call, on in ((SEQUENTIAL, "the sequential engine"), (eng, who)):
            got = self.second_order(grads, call, f"{who} {what} second order on {on}")
            if got is False:
                return False
            self.mismatch(f"{who} {what}: second order on {on}", len(ref),
                          diff_all(ref, got, "d penalty / d leaf"))
        return True


def check_create_graph(h, family, seed):
    """The create_graph step of a unit (module docstring)."""
    cp = _Pass(h, family, seed)
    _compare(cp)
    _check_freed(cp)  # here: every reference the comparison held is gone


def _compare(cp):
    """The sequential references, then every engine target against them."""
    from .faults import SEQUENTIAL
    h = cp.h
    got = cp.call(cp.grad(SEQUENTIAL), "sequential grad()")
    if got is None:
        return
    ref, first = got
    ref_graph, bad = made_graph(ref, first, cp.base)
    cp.refs += made_nodes(ref, first)
    if not cp.mismatch("sequential grad()", len(ref), bad + not_tensors(ref, "result")):
        return
    ref_second = cp.second_order(ref, SEQUENTIAL, "sequential second-order grad()")
    if ref_second is False:
        return
    targets = h.targets(cp.rng, cp.case.nodes)
    par = [i for i, (w, _) in enumerate(targets) if w > 1] or list(range(len(targets)))
    k = par[int(cp.rng.integers(len(par)))]
    for i, (w, variant) in enumerate(targets):
        if h.stop_reason:
            return
        eng, who = h.engine(w, variant), f"{variant} x{w}"
        if _check_grad(cp, eng, who, ref, ref_graph, ref_second if i == k else None) \
                and i == k:
            _check_backward(cp, eng, who)


def _check_grad(cp, eng, who, ref, ref_graph, ref_second) -> bool:
    """`eng.grad(create_graph=True)`: gradients, recorded graph, second order from its
    graph on the sequential engine and on `eng`. False if a call failed."""
    got = cp.call(cp.grad(eng), f"{who} grad()")
    if got is None:
        return False
    grads, first = got
    cp.refs += made_nodes(grads, first)
    graph, problems = made_graph(grads, first, cp.base)
    cp.mismatch(f"{who} grad()", len(grads),
                diff_all(ref, grads, "grad() input")
                + problems + graph_diff(ref_graph, graph, f"{who} grad()"))
    return ref_second is None or cp.check_second(grads, eng, who, ref_second, "grad()")


def _check_backward(cp, eng, who):
    """`backward(create_graph=True)` from the priors on the sequential engine and on
    `eng`: `.grad` Tensors, bitwise and recorded alike (and, with STRICT_WRITE_BACK, their
    second order)."""
    from .faults import SEQUENTIAL
    c, leaves = cp.case, cp.case.leaves
    results = []
    for call, name in ((SEQUENTIAL, "sequential"), (eng, who)):
        set_grads(leaves, cp.priors)
        got = cp.call(lambda call=call: call.backward(c.root, c.seed_grad, retain_graph=True,
                                                      create_graph=True),
                      f"{name} backward()")
        if got is None:
            break
        grads = [t.grad for t in leaves]
        cp.refs += made_nodes(grads, got[1])
        had = [p is not None for p in cp.priors]
        results.append((grads, write_back_graph(leaves, had, got[1], cp.base)))
    set_grads(leaves, [None] * len(leaves))  # .grad Tensors hold the recorded graph
    if len(results) < 2:
        return
    (ref, (ref_graph, bad)), (grads, (graph, problems)) = results
    cp.mismatch(f"{who} backward()", len(leaves),
                bad + diff_all(ref, grads, lambda j: f"leaf {j} {leaves[j].shape} "
                                                 f"{leaves[j].dtype}")
                + problems + graph_diff(ref_graph, graph, f"{who} backward()"))
    if STRICT_WRITE_BACK:
        ref_second = cp.second_order(ref, SEQUENTIAL, "sequential backward() second order")
        if ref_second is not None and ref_second is not False:
            cp.check_second(grads, eng, who, ref_second, "backward()")


def _check_freed(cp):
    """Every node the passes recorded is freed once the gradients and the graph are
    dropped (by reference counting, or at worst by the cycle collector)."""
    refs = cp.refs
    cp.case = cp.inputs = cp.refs = None
    alive = [r for r in refs if r() is not None]
    if alive:  # held by a reference cycle: counted (not a failure)
        cp.h.report.notes_counter("create_graph: recorded nodes freed only by gc")
        gc.collect()
        alive = [r for r in refs if r() is not None]
    if alive:
        h = cp.h
        names = sorted({r().name for r in alive if r() is not None})
        h.fail("leak", cp.family, cp.seed,
               f"create_graph: {len(alive)} of {len(refs)} recorded nodes still alive after "
               f"their gradients were dropped ({', '.join(names[:5])})")
        h.report.fam(cp.family).leaks += 1
