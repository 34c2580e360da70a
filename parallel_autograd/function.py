"""User-defined ops: subclass `Function` with `forward(ctx, ...)` and `backward(ctx, grad)`.

    class Cube(pa.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    y = Cube.apply(t)

`forward` receives ndarrays for tensor arguments (other arguments as given) and
returns an ndarray; `backward` receives the output gradient as an ndarray and
returns one gradient (or None) per forward argument. `backward` may run on an
engine worker thread; it may itself call `backward`/`grad` (reentrant).
"""
from __future__ import annotations

import numpy as np

from .grad_mode import no_grad
from .primitive import record
from .tensor import Tensor


class FunctionCtx:
    """Per-call scratch space shared by `forward` and `backward`."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()

    def save_for_backward(self, *arrays):
        self.saved_tensors = tuple(a.data if isinstance(a, Tensor) else a for a in arrays)


class Function:
    """A user-defined op with its own backward, like `torch.autograd.Function`:
    subclass it with static `forward(ctx, *args)` (on arrays; `ctx.save_for_backward`
    keeps what backward needs) and `backward(ctx, *grads)` (one gradient per input,
    None where there is none), then call `MyOp.apply(*args)`. `backward` may run on
    a worker thread of the parallel engine."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        raw = [a.data if isinstance(a, Tensor) else a for a in args]
        with no_grad():
            out = cls.forward(ctx, *raw, **kwargs)
        if isinstance(out, Tensor):
            out = out.data
        if isinstance(out, (tuple, list)):  # np.asarray would silently stack them
            raise TypeError(f"{cls.__name__}.forward returned a {type(out).__name__}: a "
                            "Function has exactly one output (return one array)")
        backward = cls.backward

        def joint(g, ctx):
            grads = backward(ctx, g)
            grads = grads if isinstance(grads, tuple) else (grads,)
            return tuple(x.data if isinstance(x, Tensor) else x for x in grads)

        # ctx travels as the node's saved value (not in the closure), so the engine
        # frees ctx.saved_tensors with the node's other saved values after backward.
        node_name = cls.__name__
        return record(node_name, np.asarray(out), args, saved=(ctx,), joint=joint)
