"""Version counting: detecting in-place writes to values a graph saved.

Every tensor has a counter `t._vc`, a one-element list holding the epoch of the last
in-place write to its memory (0: never). Tensors that view the same memory (`detach()`,
and ops whose result is a numpy view of an input, such as reshape or basic indexing, or
the input's very array, such as a squeeze that removes nothing) share one counter:
`primitive.record` gives a result the counter of the input whose memory it aliases.
`EPOCH[0]` is the latest epoch handed out; `bump(t)` hands out the next one and stamps it
on `t`'s counter.

A node records the counters of its tensor inputs and of its output (`Node.versions`)
and the epoch at its creation (`Node.epoch`). Before its rule runs, backward checks
them only when some write happened since (`EPOCH[0] > node.epoch`, one comparison on
the per-node path): a counter stamped later than the node means a value the rule may
read was overwritten, and the call fails with PyTorch's error, changing no `.grad`.
Writes through `.data` (a Tensor with a counter of its own) bypass this, as in PyTorch.

Thread safety: `bump` may run on any thread (a lock keeps `EPOCH` increasing);
reading counters is racy by design (a write racing with a backward that reads the
value is the user's race, as in PyTorch).
"""
from __future__ import annotations

from . import locks

EPOCH = [0]


def bump(t) -> None:
    """`t`'s memory was written in place: stamp its counter with a new epoch."""
    with locks.version:
        e = EPOCH[0] + 1
        EPOCH[0] = e
        t._vc[0] = e


def check(node) -> None:
    """Raise if a tensor `node` saved was written in place after `node` was made."""
    epoch = node.epoch
    last = len(node.versions) - 1
    for i, vc in enumerate(node.versions):
        if vc[0] > epoch:
            what = "the output" if i == last else "an input"
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified "
                f"by an inplace operation: {what} of {node.name} (node seq={node.seq}) was "
                f"written in place after {node.name} recorded it. Use an out-of-place op "
                f"(y = y + x instead of y += x), or clone the tensor before the write")

