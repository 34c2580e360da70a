"""`create_graph=True`: a backward pass that records the graph of its own gradients.

Both engines run such a pass like any other (same plan, order, accumulation and
write-back), with three differences, all here:

- Gradients are Tensors. Each node's rule runs in its differentiable form
  (`ops.forms.graph_grads`: the same op functions users call, with grad mode on), and
  contributions are summed by the `add` op, in the canonical order, so the sums are
  recorded too (`graph_add`).
- Every node the pass makes is noted with a tag (`grad_mode.Recording`): the node whose
  rule, hook or gradient sum made it, by that node's position in `backward_order`.
  Rule and hook nodes of the node at position p get (2p + 1, 0), the sum of its r-th
  contribution (2p, r); a counter numbers the nodes made under one tag.
- When the pass has succeeded, `renumber` gives the nodes it made fresh `seq` numbers
  in (tag, counter) order. A node's inputs come from earlier positions or earlier in
  the same tag, so the order is a valid creation order; and it does not depend on which
  thread made which node when: the graph the parallel engine records is numbered as the
  sequential engine's is, so differentiating it again sums in the same order (bitwise).

Thread safety: a pass's threads append to one list (`Plan.made`; list.append is atomic);
`renumber` runs on the calling thread after every worker is done with the call.
"""
from __future__ import annotations

import numpy as np

from ..grad_mode import Recording, grad_mode
from ..node import next_seq
from ..tensor import Tensor
from ..ops.forms import cast
from .accumulate import backward_order, graph_add


def positions(nodes) -> dict:
    """node -> its index in `backward_order` (the tags' positions)."""
    return {node: i for i, node in enumerate(backward_order(nodes))}


def as_graph_seed(grad, seed: np.ndarray) -> Tensor:
    """A seed gradient as a Tensor: the caller's own Tensor when it passed one (its
    graph stays: the result can be differentiated with respect to it), else a constant."""
    if isinstance(grad, Tensor) and grad._data is seed:
        return grad
    return Tensor._wrap(seed)


class GraphPending(dict):
    """The sequential walk's `Pending` for create_graph: node -> (sum, contributions so
    far), each sum recorded by `graph_add` with the tag (2 * position, rank)."""

    __slots__ = ("pos", "out")

    def __init__(self, pos: dict, out: list):
        super().__init__()
        self.pos = pos
        self.out = out

    def add(self, node, g) -> None:
        prev = self.get(node)
        if prev is None:
            self[node] = (g, 1)
        else:
            buf, r = prev
            self[node] = (graph_add(buf, g, (2 * self.pos[node], r), self.out), r + 1)


def hook_result(node, g: Tensor, r):
    """What a tensor hook returned, in a create_graph pass: a Tensor of g's shape (its
    graph kept), cast to g's dtype by an op; arrays become constants."""
    if not isinstance(r, Tensor):
        arr = np.asarray(r)
        if arr.dtype.kind not in "biufc":
            raise TypeError(f"hook on the gradient of {node.name} returned a "
                            f"{type(r).__name__} of dtype {arr.dtype}, not a numeric array")
        r = Tensor._wrap(arr)
    if r.shape != g.shape:
        raise ValueError(f"hook on the gradient of {node.name} returned shape {r.shape}, "
                         f"expected {g.shape}")
    if r.dtype != g.dtype:
        r = cast(r, g.dtype)
    return r


def renumber(made: list) -> None:
    """Give the nodes a successful create_graph pass made fresh creation numbers in
    (tag, counter) order (see the module docstring); or, when called inside a rule of an
    enclosing create_graph pass, hand them in that order to the enclosing pass."""
    if not made:
        return
    made.sort(key=_tag_key)
    outer = grad_mode()
    if isinstance(outer, Recording):
        # A pass run by a rule or hook of an enclosing create_graph pass (a checkpoint's
        # recomputation, a hook calling grad): its nodes become that rule's, in this
        # pass's order, and are numbered with the enclosing pass's nodes when it ends, so
        # they stay after the nodes that rule made before calling this pass (their inputs).
        for entry in made:
            outer.made(entry[2])
        made.clear()
        return
    fresh = [next_seq() for _ in made]  # unique, and above every node made so far
    fresh.sort()
    for (_, _, node), seq in zip(made, fresh):
        node.seq = seq
    made.clear()


def _tag_key(entry):
    return entry[0], entry[1]

