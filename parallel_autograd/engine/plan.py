"""Planning one backward call, shared by both engines.

`plan_call` validates the user's arguments and builds a `Plan`: the root nodes and
their seed gradients, every node to visit with its in-degree, and (for `grad()`)
which nodes are on a path to a requested input. `collect` turns what a `grad()` call
captured into its result. Everything is iterative (explicit stacks), so a
100,000-node chain is fine, and every check happens before any rule runs, so a
rejected call changes nothing.
"""
from __future__ import annotations

import numpy as np

from ..node import Node, accumulator_for, freed_graph_message
from ..tensor import Tensor
from .accumulate import backward_order
from .graph import as_graph_seed, positions


class Plan:
    """What one backward call needs to know about its graph.

    roots: list of (node, seed gradient), seeds in argument order.
    in_degree: node -> number of edges into it from nodes that run (Kahn in-degree),
        for every node of the call: all reachable from the roots or, with pruning,
        on a path to a target. `nodes` is its keys.
    runs: None (every node runs its rule) or the set of nodes whose rule runs.
    input_masks: None, or node -> one bool per input: send a gradient there (pruning).
    targets: node -> list of input positions to capture (grad()), else empty.
    retain_graph: keep saved values after the call.
    accumulate: write leaf/retained gradients to `.grad` (backward) or not (grad()).
    """

    __slots__ = ("roots", "in_degree", "runs", "targets", "input_masks", "retain_graph",
                 "accumulate", "positions", "made")

    def __init__(self, roots, in_degree, retain_graph: bool):
        self.roots = roots
        self.in_degree = in_degree
        self.retain_graph = retain_graph
        self.runs = None
        self.targets = {}
        self.input_masks = None
        self.accumulate = True
        self.positions = None  # create_graph: node -> position in backward_order
        self.made = None       # create_graph: [(tag, k, node)] the pass made

    @property
    def create_graph(self) -> bool:
        """Whether this call records the graph of its gradients (engine/graph.py)."""
        return self.positions is not None

    @property
    def nodes(self):
        """Every node of the call (a view of `in_degree`'s keys)."""
        return self.in_degree.keys()

    def with_roots(self, roots) -> "Plan":
        """This plan with other seeds on the same root nodes (one row of a batched
        `grad`): everything else shared, read-only, except create_graph's own `made`."""
        p = Plan(roots, self.in_degree, self.retain_graph)
        p.runs, p.targets, p.input_masks = self.runs, self.targets, self.input_masks
        p.accumulate, p.positions = self.accumulate, self.positions
        p.made = None if self.made is None else []
        return p


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def seed_gradient(root: Tensor, grad, index: int = 0) -> np.ndarray:
    """Validate the gradient for one output, making ones for scalar outputs."""
    if not isinstance(root, Tensor):
        raise TypeError(f"backward: output {index} is a {type(root).__name__}, not a Tensor")
    if not root.requires_grad:
        raise RuntimeError(
            f"output {index} (shape {root.shape}) does not require grad and has no grad_fn: "
            "nothing to differentiate (did you run it under no_grad, or forget "
            "requires_grad=True on a leaf?)")
    if grad is None:
        if root._data.size != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs: output {index} has "
                f"shape {root.shape}; pass grad= with that shape")
        return np.ones(root.shape, dtype=root.dtype)
    if isinstance(grad, Tensor):
        grad = grad._data
    if isinstance(grad, (np.ndarray, np.generic)):
        if grad.dtype != root.dtype:
            # PyTorch casts a real grad_output to the output's dtype (float64 ones for a
            # float32 output); complex against real it refuses
            if grad.dtype.kind == "c" or root.dtype.kind == "c":
                raise RuntimeError(
                    f"For complex Tensors, both grad_output and output are required to "
                    f"have the same dtype. Mismatch in dtype: grad_output[{index}] has a "
                    f"dtype of {grad.dtype} and output[{index}] has a dtype of {root.dtype}.")
            grad = grad.astype(root.dtype)
        grad = np.asarray(grad)
    else:
        grad = np.asarray(grad, dtype=root.dtype)
    if grad.shape != root.shape:
        raise ValueError(f"grad for output {index} has shape {grad.shape} but the output "
                         f"has shape {root.shape}")
    return grad


def backward_seeds(roots, grad):
    """`backward`'s `grad` as plan_call's grad_outputs: one per root when `roots` is a
    list or tuple (PyTorch's `torch.autograd.backward(tensors, grad_tensors)`), else
    the one root's."""
    if grad is None:
        return None
    if isinstance(roots, (list, tuple)):
        return list(grad) if isinstance(grad, (list, tuple)) else [grad]
    return [grad]


def root_node(t: Tensor) -> Node:
    return t.grad_fn if t.grad_fn is not None else accumulator_for(t)


def discover(roots) -> dict:
    """Nodes reachable from `roots` -> in-degree (edges from reachable nodes).

    Raises if any reachable node's saved values were freed by an earlier backward.
    """
    deps = {}
    stack = []
    for node in roots:
        if node not in deps:
            deps[node] = 0
            stack.append(node)
    while stack:
        node = stack.pop()
        if node.released:
            raise RuntimeError(freed_graph_message(node))
        for nxt in node.next_nodes:
            if nxt is None:
                continue
            if nxt in deps:
                deps[nxt] += 1
            else:
                deps[nxt] = 1
                stack.append(nxt)
    return deps


def plan_call(outputs, grad_outputs=None, inputs=None, retain_graph=None,
              allow_unused=False, create_graph=False) -> Plan:
    """Validate a backward()/grad() call and build its Plan (no rule runs here).
    `retain_graph` None means `create_graph`'s value (PyTorch's default)."""
    if retain_graph is None:
        retain_graph = create_graph
    outputs = _as_list(outputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    else:
        grad_outputs = _as_list(grad_outputs)
        if len(grad_outputs) != len(outputs):
            raise ValueError(f"got {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    roots = []
    for i, (t, g) in enumerate(zip(outputs, grad_outputs)):
        seed = seed_gradient(t, g, i)  # validates t before root_node touches it
        if create_graph:
            seed = as_graph_seed(g, seed)
        roots.append((root_node(t), seed))
    plan = Plan(roots, discover([n for n, _ in roots]), bool(retain_graph))
    if inputs is not None:
        _prune(plan, _as_list(inputs), allow_unused)
    if create_graph:
        plan.positions = positions(plan.nodes)
        plan.made = []
    return plan


def _prune(plan: Plan, inputs, allow_unused: bool) -> None:
    """Keep only nodes on a path from the roots to an input (grad() semantics)."""
    plan.accumulate = False
    targets = {}
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"grad: input {i} is a {type(t).__name__}, not a Tensor")
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
        if t.grad_fn is not None:
            node = t.grad_fn
        else:
            ref = t._accumulator
            node = ref() if ref is not None else None
        if node is None or node not in plan.nodes:
            if not allow_unused:
                raise RuntimeError(
                    f"grad: input {i} (shape {t.shape}) is not part of the graph of the "
                    "outputs; pass allow_unused=True to get None for it")
            continue
        targets.setdefault(node, []).append(i)
    needed = set(targets)
    # Ascending seq visits every node after all the nodes it sends gradients to.
    for node in reversed(backward_order(plan.nodes)):
        if node not in needed:
            for nxt in node.next_nodes:
                if nxt in needed:
                    needed.add(node)
                    break
    runs = set()
    masks = {}
    for node in needed:
        mask = tuple(nxt is not None and nxt in needed for nxt in node.next_nodes)
        if any(mask):
            runs.add(node)
            masks[node] = mask
    deps = dict.fromkeys(needed, 0)
    for node in runs:
        for nxt, m in zip(node.next_nodes, masks[node]):
            if m:
                deps[nxt] += 1
    plan.roots = [(n, g) for n, g in plan.roots if n in needed]
    plan.in_degree = deps
    plan.runs = runs
    plan.targets = targets
    plan.input_masks = masks


def collect(plan: Plan, captured: dict, inputs) -> tuple:
    """Order the gradients a grad() call captured like `inputs`, as a tuple of Tensors
    (PyTorch's): zeros if reached by no gradient, None if not in the graph at all
    (allow_unused). A plain pass's arrays are wrapped, not copied."""
    result = [None] * len(inputs)
    wrap = Tensor._wrap
    for node, slots in plan.targets.items():
        g = captured.get(node)
        for i in slots:
            t = inputs[i]
            if g is None:
                result[i] = wrap(np.zeros(t._data.shape, t._data.dtype))
            else:
                result[i] = g if plan.create_graph else wrap(g)
    return tuple(result)
