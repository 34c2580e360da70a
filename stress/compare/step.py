"""One timed training step of a workload, the way a training loop runs it: the
parameters (the workload's leaves) persist from step to step; a step sets their
gradients to None (`zero_grad`), records the forward pass, runs the backward pass
and then the optimizer's step (`OPTIMIZERS`). Each part is timed on its own; the
step's time is the whole of it.

A `Session` holds one library's leaves for one workload. Its first `define` call
makes them (the backend's `leaf`); every later forward pass runs the same
definition with a backend whose `leaf` hands back those tensors in the same order,
so a forward pass records the graph and copies nothing.
"""
from __future__ import annotations

import dataclasses
import gc
import resource
import time
from typing import Callable, Optional

import parallel_autograd as pa

from .backend import PA, torch_backend

def _torch_adam(leaves):
    import torch
    return torch.optim.Adam(leaves, lr=1e-4).step


# The optimizer step of a training step, per library: a factory `(leaves) -> step()`,
# or None for none. Adam (lr 1e-4, PyTorch's defaults otherwise) in both: every step
# (and its column) includes it; the report's legend says whether it did.
OPTIMIZERS: dict = {"parallel_autograd": lambda leaves: pa.optim.Adam(leaves, lr=1e-4).step,
                    "torch": _torch_adam}


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Session:
    """A workload's persistent leaves in one library (`torch=True`: PyTorch)."""

    def __init__(self, w, data: dict, torch: bool = False):
        self.w, self.data = w, data
        base = torch_backend() if torch else PA
        self._program = w.program(data, base) if getattr(w, "program", None) else None
        if self._program is not None:  # an nn.Module model, built once
            self.leaves = list(self._program.leaves)
            self._next = None
            self._init_optimizer(torch)
            return
        made = []

        def make(a):
            t = base.leaf(a)
            made.append(t)
            return t
        loss, _ = w.define(data, dataclasses.replace(base, leaf=make))
        del loss
        self.leaves = made
        self._next: Optional[Callable] = None
        self._replay = dataclasses.replace(base, leaf=lambda a: self._next())
        self._init_optimizer(torch)

    def _init_optimizer(self, torch: bool) -> None:
        factory = OPTIMIZERS["torch" if torch else "parallel_autograd"]
        self.optimizer_step = factory(self.leaves) if factory is not None else None

    def zero_grad(self) -> None:
        """Every leaf's gradient to None (as `optimizer.zero_grad()` does in torch)."""
        for t in self.leaves:
            t.grad = None

    def forward(self):
        """Record the forward pass on the persistent leaves: the loss."""
        if self._program is not None:
            return self._program.loss()
        self._next = iter(self.leaves).__next__
        loss, _ = self.w.define(self.data, self._replay)
        self._next = None
        return loss


def backward_call(config: str, shared_engine: Callable) -> Callable:
    """`loss -> stats or None`: how configuration `config` runs the backward pass."""
    if config in ("torch", "torch_child"):
        return lambda loss: loss.backward()
    if config == "seq":
        return lambda loss: pa.backward(loss)
    if config == "shared":
        return lambda loss: shared_engine().backward(loss, stats=True)
    n = int(config[3:])
    return lambda loss: pa.backward_parallel(loss, num_workers=n, stats=True)


def timed_step(session: Session, backward: Callable) -> dict:
    """One training step with the cyclic GC off: seconds of forward, backward and the
    whole step, minor page faults of the backward pass, the backward's stats."""
    gc.collect()
    gc.disable()
    perf = time.perf_counter
    try:
        t0 = perf()
        session.zero_grad()
        t1 = perf()
        loss = session.forward()
        t2 = perf()
        f0 = _minflt()
        st = backward(loss)
        t3 = perf()
        faults = _minflt() - f0
        if session.optimizer_step is not None:
            session.optimizer_step()
        t4 = perf()
    finally:
        gc.enable()
    del loss
    return {"forward": t2 - t1, "backward": t3 - t2, "step": t4 - t0, "faults": faults,
            "stats": st}
