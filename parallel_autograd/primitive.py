"""Declaring ops: one declaration per op (`defop`), and the registry that holds them all.

An op is declared once, where its forward is written::

    @defop(formula=lambda g, ans, input: g * (1 - ans * ans), kernel=_tanh_kernel)
    def tanh(input: Tensor) -> Tensor:
        \"\"\"The hyperbolic tangent.\"\"\"
        return P.tanh(input)

The decorated function is the op's forward on numpy arrays; its name, signature,
annotations and docstring are the op's. From it `defop` makes:

- the public function: the same signature (a real one, for `help()` and IDEs), Tensors or
  numbers in, a Tensor out, recording a `Node` when an input requires grad;
- the derivative: `formula`, one function per differentiable input (or one `Joint` for
  all), `formula(g, ans, *inputs, **params)`, written with the package's own ops, so it is
  differentiable again (create_graph, to any order: `ops/forms.py` runs it). A `kernel` (one
  per input, or one `Joint`) is an optional numpy override of the same derivative for first
  order, written where measurement asks for it (fused passes, `out=` reuse); without one,
  the formula runs at first order too. `tests/test_registry.py` checks that each kernel
  equals its formula at first order;
- the Tensor method (`method=True`, or another name), the export from `pa` (or from the
  namespace of `module`, e.g. `torch.nn.functional` -> `pa.nn.functional`);
- a registry entry (`REGISTRY`), which one test walks: a formula per differentiable input,
  gradcheck and gradgradcheck, both engines bitwise, the method where PyTorch has one, a line
  in docs/ops.md, and PyTorch's values, gradients and dtypes where torch is installed.

Composite ops (built from other ops) are declared with `composite`: no rule at all, since
their ops record their own nodes; they get the method, export and registry entry.

Dtypes. `dtypes=` (both) names the dtypes PyTorch's kernel computes in ("floating",
"inexact", "real", "numeric", dtype names, or a tuple of them; default all): the first
input of another dtype (after promotion) is refused with PyTorch's NotImplementedError
(`dtypes.DtypeNotImplementedError`, `"gelu" not implemented for 'Long'`) at the public
function; a composite's unchecked body is its `.unchecked`, for the library's own calls.

Calling conventions. `inputs` names the differentiable parameters (default: the first);
`inputs=("*tensors",)` makes the one parameter `tensors` a sequence of them (cat, stack:
the forward gets a list of arrays, the Node one input per element, the formula a `Joint`
called as `formula(g, ans, *tensors, **params)`). `sizes="shape"` lets the parameter
`shape` take its ints spread as further positional arguments too (`x.reshape(2, 3)` beside
`reshape(x, (2, 3))`, as PyTorch's methods take them). The forward receives every
parameter as passed (Tensors unwrapped to arrays), and returns
the output array, or `Saved(out, *extras)` to keep more values for the kernels. A Node
saves `(ans, *inputs, *extras)`; rules are called as `rule(g, ans, *inputs, **params)`
(kernels also get the extras after the inputs), `params` being every other parameter,
defaults included, by name (`None` when the op has none). Parameters annotated with a
Tensor type that are not differentiable inputs (an index, a mask) are unwrapped too. A
forward with a keyword-only parameter `needs_input_grad` gets, there, one bool per input
in `inputs`: whether a gradient will be asked of it (it requires grad and grad mode is
on), PyTorch's `ctx.needs_input_grad`; so it keeps for its kernels only what they will
use (a convolution's columns when its weight takes a gradient). The parameter is not
part of the public signature, nor of the node's params.

Formulas get the extras too with `defop(formula_extras=True)`: `formula(g, ans, *inputs,
*extras, **params)`, as the kernels. For an op whose derivative reads what its forward
computed (a recurrence's activated gates) rather than an input it could recompute that from:
the input is then declared `unsaved` (the formula gets a placeholder of its shape and dtype,
a Tensor routed to its node under create_graph: it carries the graph, its value unread), so
the node keeps the extras and not the input. In a create_graph pass the extras are
constants (arrays): whatever the formula derives from them must reach the inputs' graph
through ops of the inputs (`_recurrent.activation_of(z, a)`: value a, derivative at a).

`record` is the lower level: it wraps an array in a Tensor and attaches a Node; `primitive`
makes an unregistered op from a forward and first-order rules (the extension API for users).

Thread safety: declaring ops happens at import time; the registry is then read only. The
generated functions are as thread safe as their forwards (pure functions of their inputs).
"""
from __future__ import annotations

import dis
import functools
import inspect
import keyword
import os

import numpy as np

from . import anomaly
from .dtypes import FAST, dtype_checker, not_implemented, promoter, same_dtype_checker, supported
from .grad_mode import grad_mode
from .node import Node, accumulator_for
from .tensor import Tensor

__all__ = ["OpDef", "Joint", "Saved", "REGISTRY", "defop", "composite", "exports", "record",
           "primitive", "placeholder"]


def record(name: str, out, inputs, vjps=None, saved=(), kwargs=None, joint=None, cost=None,
           threaded=False, op=None):
    """Wrap `out` in a Tensor; if any input requires grad, attach a Node.

    `inputs` are the op's differentiable arguments (Tensors or raw values); `vjps`
    gives one rule per input (None: no gradient flows there), or `joint` one rule
    for all. Only inputs that require grad get a rule: a frozen weight costs nothing.
    `cost` estimates the backward work (about ns on one core; default: output size) and
    `threaded` says the rules run multithreaded kernels (BLAS): the cost model (`engine/cost.py`).
    `op` is the registry entry (`OpDef`) whose formulas give the create_graph form; with
    one, its own rules (`vjps`, `joint` and `threaded` are its) and `_record_op`'s counters.
    The node checks the version counters of every tensor input and of the output.
    """
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    if op is not None:
        return _record_op(op, out, inputs, saved, kwargs, cost)
    mode = grad_mode()
    if not mode:
        return _unrecorded(out, inputs)
    n = len(inputs)
    nexts = [None] * n
    meta = [None] * n
    rules = None if vjps is None else [None] * n
    vcs = []  # every tensor's counter (a Function's or primitive's node), then the output's
    tracked = False
    for i in range(n):
        x = inputs[i]
        if not isinstance(x, Tensor):
            continue
        vcs.append(x._vc)
        if x._requires_grad:
            rule = joint if rules is None else vjps[i]
            if rule is None:
                continue
            fn = x.grad_fn
            nexts[i] = fn if fn is not None else accumulator_for(x)
            meta[i] = (x._data.shape, x._data.dtype)
            if rules is not None:
                rules[i] = rule
            tracked = True
    src = _viewed(out, inputs)
    vc = _shared_counter(out, inputs) if src is None else src._vc
    if not tracked:
        return Tensor._wrap(out, None, vc)
    vcs.append(vc)
    size = out.size
    node = Node(name, tuple(nexts), tuple(meta), saved,
                None if rules is None else tuple(rules), joint if rules is None else None,
                kwargs, size if cost is None else cost, threaded, size, tuple(vcs), None)
    return _attach(mode, node, out, vc, src)


def _unrecorded(out: np.ndarray, inputs) -> Tensor:
    """`out` as a Tensor without history (grad mode off), sharing the version counter of
    the input it is or views."""
    if out.base is None:  # fresh memory, or an input's very array: identity decides
        for x in inputs:
            if isinstance(x, Tensor) and x._data is out:
                return Tensor._wrap(out, None, x._vc)
        return Tensor._wrap(out, None, None)
    return Tensor._wrap(out, None, _shared_counter(out, inputs))


def _viewed(out: np.ndarray, inputs):
    """The input tensor whose array `out` is or views by identity (`_shared_counter`'s
    fast test), else None."""
    root = out.base
    for x in inputs:
        if isinstance(x, Tensor):
            d = x._data
            if d is out or (root is not None and (d is root or d.base is root)):
                return x
    return None


def _attach(mode, node: Node, out: np.ndarray, vc: list, src) -> Tensor:
    """The output tensor of a recorded `node` (its counter `vc`; `src`, the input it views,
    or None), with the rare cases out of the per-op line: a create_graph pass recording,
    anomaly detection, a view (its base, for writes through it: CopySlices)."""
    if mode is not True:  # a create_graph pass is recording (grad_mode.Recording)
        mode.made(node)
    if anomaly_mode()[0]:  # detect_anomaly: note where the op is created
        anomaly.note(node)
    t = Tensor._wrap(out, node, vc)
    if src is not None:
        t._base = getattr(src, "_base", src)
    return t


def _record_op(op: OpDef, out: np.ndarray, inputs, saved: tuple, kwargs, cost) -> Tensor:
    """`record` for a declared op (its generated function's last step): `op`'s rules, a
    node keeping `saved` and checking the counters of the arrays it keeps (`_read_counters`).
    The per-op path of every forward: one pass over the inputs, identity tests only."""
    mode = grad_mode()
    if not mode:
        return _unrecorded(out, inputs)
    n = len(inputs)
    rules = op.rules  # (None: one joint rule)
    nexts = None
    keeps = len(saved) == n + 1  # no extras: identity tests decide the counters
    vcs = []  # the counters of the inputs whose arrays the node keeps
    root = out.base
    vc = src = None  # the output's counter and the input it views (see _shared_counter)
    tracked = 0
    for i in range(n):
        x = inputs[i]
        if not isinstance(x, Tensor):
            continue
        d = x._data
        if keeps and saved[i + 1] is d:
            vcs.append(x._vc)
        if vc is None and (d is out or (root is not None and (d is root or d.base is root))):
            vc = x._vc
            src = x
        if x._requires_grad and (rules is None or rules[i] is not None):
            if nexts is None:
                nexts = [None] * n
                meta = [None] * n
            fn = x.grad_fn
            nexts[i] = fn if fn is not None else accumulator_for(x)
            meta[i] = (d.shape, d.dtype)
            tracked += 1
    fresh = vc is None and root is None  # (new memory: no input's counter)
    if vc is None:
        vc = [0] if root is None or _owns(root) else _shared_counter(out, inputs)
    if nexts is None:
        return Tensor._wrap(out, None, vc)
    if fresh and keeps:  # new memory: no counter is shared with an input
        if saved[0] is out:
            vcs.append(vc)
        elif vcs:
            vcs.append(UNREAD)  # (the last is the output's: version.check's message)
        vcs = tuple(vcs) if vcs else None  # (add, sub: nothing a write could invalidate)
    else:  # (a view of an input, or extras kept: `_read_counters` decides)
        vcs = tuple(_read_counters(inputs, saved, out, vc))
    if rules is not None and tracked != op.n_rules:  # (some inputs take no gradient)
        rules = tuple(None if nx is None else r for r, nx in zip(rules, nexts))
    size = out.size
    node = Node(op.name, tuple(nexts), tuple(meta), saved, rules, op.joint, kwargs,
                size if cost is None else cost, op.threaded, size, vcs, op)
    if mode is not True or anomaly_mode()[0]:
        return _attach(mode, node, out, vc, src)
    t = Tensor._wrap(out, node, vc)
    if src is not None:  # a view: the tensor it views, for writes through it (CopySlices)
        t._base = getattr(src, "_base", src)
    return t


def _record_one(op: OpDef, out: np.ndarray, x, saved: tuple, kwargs, cost) -> Tensor:
    """`_record_op` of a one-input op (unary math, views, reductions), `x` its input, with
    no loop: the common case (`x` a Tensor taking a gradient) written out, the counters
    as `_record_op` keeps them; anything else goes to `_record_op`."""
    mode = grad_mode()
    rules = op.rules
    if not (mode and isinstance(x, Tensor) and x._requires_grad and
            (rules is None or rules[0] is not None)):
        return _record_op(op, out, (x,), saved, kwargs, cost)
    d = x._data
    root = out.base
    src = None
    if d is out or (root is not None and (d is root or d.base is root)):  # x or a view of it
        src = x
        vc = x._vc
        vcs = (vc, vc) if len(saved) == 2 else tuple(_read_counters((x,), saved, out, vc))
    elif root is None and len(saved) == 2:  # new memory: no counter is shared with x
        vc = [0]
        if saved[0] is out:
            vcs = (x._vc, vc) if saved[1] is d else (vc,)
        else:
            vcs = (x._vc, UNREAD) if saved[1] is d else None
    else:  # (a view of other memory, or extras kept: `_read_counters` decides)
        vc = [0] if root is None or _owns(root) else _shared_counter(out, (x,))
        vcs = tuple(_read_counters((x,), saved, out, vc))
    fn = x.grad_fn
    size = out.size
    node = Node(op.name, (fn if fn is not None else accumulator_for(x),), ((d.shape, d.dtype),),
                saved, rules, op.joint, kwargs, size if cost is None else cost, op.threaded,
                size, vcs, op)
    if mode is not True or anomaly_mode()[0]:
        return _attach(mode, node, out, vc, src)
    t = Tensor._wrap(out, node, vc)
    if src is not None:  # a view: the tensor it views, for writes through it (CopySlices)
        t._base = getattr(src, "_base", src)
    return t


def _named(e: ValueError, name: str) -> None:
    """A forward's ValueError named after its op: raises `ValueError("name: ...")` from
    `e`, unless the forward named the op already (the caller then re-raises `e`)."""
    if not str(e).startswith(f"{name}:"):
        raise ValueError(f"{name}: {e}") from e


anomaly_mode = anomaly.mode
UNREAD = [0]  # the counter of an output no rule reads: never stamped (version.check)


def _kept(d: np.ndarray, a, extras: tuple) -> bool:
    """The node keeps `d` itself (`a`, its slot in `saved`) or a view of its memory among
    the extras (`Saved`)."""
    if a is d:
        return True
    root = d if d.base is None else d.base
    for e in extras:
        if type(e) is np.ndarray and (e is d or e.base is root or e is root):
            return True
    return False


def _read_counters(inputs, saved, out: np.ndarray, vc: list) -> list:
    """The version counters a declared op's node checks before its rules run (PyTorch
    checks its saved variables only): those of the inputs whose arrays the node keeps
    (not a placeholder, a stand-in or a promoted copy), then the output's if it keeps
    the output, else `UNREAD`. An output that views an input (it shares that input's
    counter) keeps the counter in both places, whatever is saved: a write into that
    memory changes the view's values behind its recorded history. On every op's path:
    identity tests only, unless the node keeps extras (`Saved`)."""
    n = len(inputs)
    vcs = []
    view = False
    if len(saved) == n + 1:
        for i in range(n):
            x = inputs[i]
            if isinstance(x, Tensor):
                xv = x._vc
                if xv is vc:
                    view = True
                    vcs.append(xv)
                elif saved[i + 1] is x._data:
                    vcs.append(xv)
        vcs.append(vc if view or saved[0] is out else UNREAD)
        return vcs
    extras = saved[n + 1:]
    for i in range(n):
        x = inputs[i]
        if isinstance(x, Tensor) and (x._vc is vc or _kept(x._data, saved[i + 1], extras)):
            view = view or x._vc is vc
            vcs.append(x._vc)
    vcs.append(vc if view or _kept(out, saved[0], extras) else UNREAD)
    return vcs


def _shared_counter(out: np.ndarray, inputs) -> list:
    """The version counter of the input whose memory `out` is or views (squeeze or
    `to` that change nothing, reshape, indexing, transpose...: writing into one writes
    into the other, so a write through either must invalidate what a graph saved of the
    other), else a fresh one.

    numpy collapses a view's `base` to the array that owns the memory, so identity tests
    decide most cases in O(1); a view made through another object (as_strided's
    DummyArray, a buffer) falls back to numpy's exact bounds test. Not recognised (no op
    does it, and the test would cost every op): a result that is the owner of an
    input's memory (a user primitive returning `a.base`)."""
    root = out.base
    if type(root) is not np.ndarray and root is not None:  # as_strided's wrapper (unfold)
        root = getattr(root, "base", root)
    for x in inputs:
        if isinstance(x, Tensor):
            d = x._data
            if d is out or (root is not None and (d is root or d.base is root)):
                return x._vc
    if root is None or _owns(root):
        return [0]
    for x in inputs:
        if isinstance(x, Tensor) and np.may_share_memory(out, x._data):
            return x._vc
    return [0]


# ---- the declaration ----------------------------------------------------------------------
class Joint:
    """One rule for all of an op's differentiable inputs: `fn(g, ans, *inputs, **params)`
    returns a tuple with one gradient (or None) per input. For ops whose input gradients
    share work (a convolution's im2col, a recurrence's backward sweep)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Saved:
    """What a forward returns to keep values beyond its output for its kernels:
    `Saved(out, *extras)`; the kernels get the extras after the inputs."""

    __slots__ = ("out", "extras")

    def __init__(self, out, *extras):
        self.out = out
        self.extras = extras


class OpDef:
    """A registry entry: everything declared about one op (see the module docstring).

    `fn` is the public function; `forward` the numpy forward; `inputs` the differentiable
    parameter names; `formulas` one differentiable rule per input (a tuple, or a `Joint`);
    `kernels` the first-order rules the Node runs (the kernel where one is declared, else
    an adapter that runs the formula on arrays); `method` the Tensor method's name (None:
    none); `module` PyTorch's namespace of the function (`torch`, `torch.nn.functional`,
    `torch.linalg`, `torch.special`); `aliases` its other names; `composite`: built from
    other ops, no rule; `needs`: the forward takes `needs_input_grad`; `promote`:
    `arrays -> arrays` run before the forward (None: none), the inputs brought to their
    common dtype or checked for one (`defop(promote=, int_to_float=)`), and the first
    input's dtype checked against `dtypes` (`defop(dtypes=)`: a frozenset of numpy dtypes,
    None for every dtype).
    """

    __slots__ = ("name", "fn", "forward", "inputs", "params", "formulas", "kernels",
                 "has_kernel", "method", "module", "export", "composite", "cost", "threaded",
                 "tensor_params", "family", "torch_name", "aliases", "modules", "variadic",
                 "shapes_only", "by_name", "needs", "unsaved", "promote", "keeps_ans",
                 "unread", "plain", "lean", "nothing", "inputs_only", "dtypes", "rules", "joint",
                 "n_rules", "promote_where", "promote_float", "formula_extras", "__weakref__")

    def __repr__(self):
        return f"<op {self.module}.{self.name}>"

    @property
    def differentiable(self) -> bool:
        return self.formulas is not None

    def __call__(self, args: tuple, params: dict | None):
        """Run the op: forward on arrays, then `record` (the generated function's body for
        the ops it does not specialise, `_fast_body`)."""
        arrays = [a._data if isinstance(a, Tensor) else a for a in args]
        promote = self.promote
        if promote is not None:  # PyTorch's type promotion, or its dtype check
            arrays = promote(arrays)
        try:
            if self.plain:  # (the common case first: one test)
                ans = self.forward(*arrays, **params) if params else self.forward(*arrays)
            else:
                ans = self._other_forward(args, arrays, params)
        except ValueError as e:
            _named(e, self.name)
            raise
        return self._finish(args, arrays, ans, params)

    def _finish(self, args: tuple, arrays: list, ans, params: dict | None):
        """The forward's result `ans` (an array, a number, or `Saved`) wrapped and recorded:
        what the node keeps (`_lean`), its cost, `_record_op`."""
        extras = ()
        if type(ans) is not np.ndarray:
            if type(ans) is Saved:
                extras = ans.extras
                ans = ans.out
            if type(ans) is not np.ndarray:
                ans = np.asarray(ans)
        if self.kernels is None:  # not differentiable: a Tensor without history (sharing the
            return record(self.name, ans, args, None, (), None)  # counter of one it views)
        if self.lean is not None:  # values no rule reads: not kept alive by the node
            saved = self._lean(ans, arrays, extras)
        else:
            saved = (ans, *arrays, *extras) if extras else (ans, *arrays)
        cost = self.cost
        return _record_op(self, ans, args, saved, params or None,
                          None if cost is None else cost(ans, *arrays, **(params or {})))

    def _other_forward(self, args: tuple, arrays: list, params: dict | None):
        """The forward of an op whose inputs are a sequence, come by name, or that takes
        `needs_input_grad`."""
        forward = self.forward
        if self.variadic:  # one parameter holding every input (cat, stack, einsum)
            if self.needs:
                return forward(arrays, needs_input_grad=_needs(args), **(params or {}))
            return forward(arrays, **params) if params else forward(arrays)
        if self.by_name:  # inputs after other parameters (scatter_add's src, recurrence's)
            named = dict(zip(self.inputs, arrays))
            if self.needs:
                return forward(**named, needs_input_grad=_needs(args), **params)
            return forward(**named, **params)
        # the forward saves only what the inputs needing grad use
        return forward(*arrays, needs_input_grad=_needs(args), **(params or {}))

    def _lean(self, ans: np.ndarray, arrays: list, extras: tuple) -> tuple:
        """What a node keeps of `(ans, *arrays, *extras)` when some of it no rule reads
        (`lean`, one entry per position: `_KEEP`, None for an output or input no rule
        loads (`_unread_inputs`), `placeholder` for one declared `unsaved` (its shape and
        dtype read), `_stand_in` for all under `shapes_only`)."""
        lean = self.lean
        if type(lean) is tuple and len(lean) == len(arrays) + 1:
            if lean is self.nothing:  # (add, sub: no rule reads any of them)
                return (*lean, *extras) if extras else lean
            if lean is _ANS_ONLY:  # (exp, tanh, sigmoid: the output, not the input)
                return (ans, None, *extras) if extras else (ans, None)
            if lean is _INPUT_ONLY:  # (sin, relu: the input, not the output)
                return (None, arrays[0], *extras) if extras else (None, arrays[0])
            if self.inputs_only:  # (mul, div, matmul: the inputs, not the output)
                return (None, *arrays, *extras) if extras else (None, *arrays)
            if lean is _SHAPE_ONLY:  # (getitem, reshape: the input's shape and dtype)
                a = arrays[0]
                a = _stand_in(a) if type(a) is np.ndarray else a
                return (None, a, *extras) if extras else (None, a)
            saved = [ans, *arrays]
            for i, how in enumerate(lean):
                if how is None:
                    saved[i] = None
                elif how is not _KEEP and type(saved[i]) is np.ndarray:
                    saved[i] = how(saved[i])
            return (*saved, *extras) if extras else tuple(saved)
        return self._lean_sequence(ans, arrays, extras)

    def _lean_sequence(self, ans, arrays: list, extras: tuple) -> tuple:
        """`_lean` of a sequence of inputs (cat): the output's entry, then the inputs' (one
        rule for them all: stand-ins under `shapes_only`, else kept)."""
        head = self.lean[0]
        saved = [None if head is None else ans if head is _KEEP else head(ans), *arrays]
        if self.shapes_only:
            saved[1:] = [_stand_in(a) if type(a) is np.ndarray else a for a in arrays]
        return (*saved, *extras) if extras else tuple(saved)


def _KEEP(a):  # (`OpDef.lean`: the array kept as it is)
    return a


_ANS_ONLY = (_KEEP, None)  # the two plans of most unary ops (`_lean`'s shortcuts)
_INPUT_ONLY = (None, _KEEP)


def _lean_plan(spec: OpDef):
    """`OpDef.lean`: per position of `(ans, *inputs)` what a node keeps (see `_lean`);
    None when it keeps them all as they are (the common case: no pass at all)."""
    n = 1 + (1 if spec.variadic else len(spec.inputs))
    plan = [_KEEP] * n
    if spec.shapes_only:
        plan = [_stand_in] * n
    elif spec.unsaved is not None:
        for i in spec.unsaved:
            plan[i] = placeholder
    if not spec.keeps_ans:
        plan[0] = None
    for i in spec.unread:
        plan[i] = None
    if all(p is _KEEP for p in plan):
        return None
    plan = tuple(plan)
    spec.inputs_only = plan[0] is None and all(p is _KEEP for p in plan[1:])
    for common in (_ANS_ONLY, _INPUT_ONLY, _SHAPE_ONLY):
        if plan == common:
            return common
    if all(p is None for p in plan):
        spec.nothing = plan
    return plan


_STAND_INS: dict = {}


def _stand_in(a: np.ndarray) -> np.ndarray:
    """A read-only array of `a`'s shape and dtype holding one element (stride 0), shared."""
    key = (a.shape, a.dtype)
    s = _STAND_INS.get(key)
    if s is None:
        if len(_STAND_INS) >= 4096:  # a bound on shapes seen (thread safe: dict operations)
            _STAND_INS.clear()
        s = _STAND_INS[key] = np.broadcast_to(np.zeros((), a.dtype), a.shape)
    return s


_SHAPE_ONLY = (None, _stand_in)  # (`_lean`'s third shortcut: unary shape ops)


REGISTRY: list[OpDef] = []  # every declared op, in declaration order
_NEEDS = "needs_input_grad"


def _needs(args) -> tuple:
    """Per input: whether it will take a gradient (a Tensor requiring grad, grad mode on)."""
    on = bool(grad_mode())
    return tuple(on and isinstance(a, Tensor) and a._requires_grad for a in args)


def _family(module: str) -> str:
    """An op's family: its module under ops/ or nn/ (a package's name for the modules
    inside it), without the leading underscore of a private module (nn/_norms.py: norms)."""
    for layer in (".ops.", ".nn."):
        if layer in module:
            module = module.split(layer, 1)[1]
            break
    return module.split(".")[0].lstrip("_")


def exports(module: str) -> dict:
    """{name: function} of the declared ops exported from PyTorch's namespace `module`
    (aliases included), for the package's `__init__` files."""
    return {n: op.fn for op in REGISTRY if op.export and module in op.modules
            for n in (op.name, *op.aliases)}

_MODULES = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft")


def defop(fn=None, *, formula=None, kernel=None, inputs=None, method=False,
          module: str = "torch", also: tuple = (), export: bool = True, name: str | None = None,
          aliases: tuple = (), quiet: bool = False, cost=None, threaded: bool = False,
          torch_name: str | None = None, sizes: str | None = None,
          shapes_only: bool = False, unsaved: tuple = (), promote=False,
          int_to_float: bool = False, dtypes=None, formula_extras: bool = False):
    """Declare an op from its numpy forward (a decorator; see the module docstring).

    - formula: the derivative, for each name in `inputs` (a function, a tuple of them in
      the order of `inputs` with None for an input without gradient, or a `Joint`);
      None: the op is not differentiable (its result has no history).
    - kernel: an optional first-order numpy rule per input (same shapes as `formula`;
      None entries fall back to the formula), or a `Joint`.
    - inputs: the differentiable parameters (default: the first parameter); `("*name",)`:
      the parameter `name` is a sequence of inputs (the formula then a `Joint`).
    - sizes: a parameter (the last positional one) that also takes its ints spread as
      further positional arguments: `reshape(x, 2, 3)`, `x.permute(1, 0)`.
    - method: True for a Tensor method of the same name, a string for another name.
    - module: PyTorch's namespace of the function (`also`: others that have it too, e.g.
      `torch.relu` besides `torch.nn.functional.relu`); export=False: in none.
    - name: the op's name (default: the function's); torch_name: PyTorch's, if another;
      aliases: other names of the same op (exported, and methods if `method`).
    - shapes_only: the rules read only the shapes and dtypes of ans and the inputs (not
      their values): the node keeps stand-ins, not the arrays (no memory held).
    - quiet: no numpy floating-point warnings from the forward and the first-order rules
      (outside an op's domain the result is inf or NaN, as in PyTorch, which does not warn).
    - cost(ans, *arrays, **params), threaded: hints for the engine's cost model.
    - unsaved: the arrays no rule reads, by name ("result" for the output, or input names):
      the node does not keep them alive (PyTorch saves only what its formulas use); the
      rules get zeros of their shape and dtype in their place (`placeholder`), whose shape
      and dtype they may read, not their values. Without a declaration, an output or an
      input that no rule reads (none of them loads that parameter: `_reads_ans`,
      `_unread_inputs`) is not kept at all (None in its place); its node then does not
      check its version, so writing into it in place (`y = a + b; y += 1`, or `a += 1`)
      leaves the node valid, as PyTorch's nodes that do not save it.
    - promote: PyTorch's type promotion of the inputs (True: all of `inputs`; a tuple: those
      named): before the forward they are brought to their `dtypes.result_type`
      (dimensioned tensors over 0-d tensors over Python numbers), arrays of another dtype
      cast, numbers made numpy scalars of it. The forward and the rules see the promoted
      arrays; each input's gradient is cast back to its own dtype by the node. "same": no
      promotion, inputs of different dtypes are PyTorch's RuntimeError (convolutions).
    - int_to_float: an integer or bool (common) dtype becomes the default dtype
      (`get_default_dtype()`, read at each call), as PyTorch's floating ops (sqrt, sin,
      true division) do; the promoted positions are `promote`'s, else all of `inputs`.
    - dtypes: the dtypes PyTorch's kernel computes in (None: all of them), a name of
      `dtypes.SUPPORT_SETS` ("floating", "inexact", "real", "numeric"), a dtype name, or a
      tuple of them; the first input (after promotion) of another dtype is PyTorch's
      refusal, `DtypeNotImplementedError` (a NotImplementedError, RuntimeError and
      TypeError): `"gelu" not implemented for 'Long'`. Checked at the public function
      only: code that calls the forward on arrays is not refused.
    - formula_extras: the formulas get the forward's extras (`Saved`) after the inputs, as
      the kernels do (constants under create_graph; see the module docstring).

    The differentiable inputs need not be the forward's first parameters (`layer_norm(input,
    normalized_shape, weight, bias)`): the forward is then called with them by name.
    """
    def declare(forward):
        return _declare(forward, formula, kernel, inputs, method, (module, *also), export,
                        name, aliases, quiet, cost, threaded, torch_name, composite=False,
                        sizes=sizes, shapes_only=shapes_only, unsaved=unsaved, dtypes=dtypes,
                        promote=promote, int_to_float=int_to_float,
                        formula_extras=formula_extras)
    return declare if fn is None else declare(fn)


def composite(fn=None, *, method=False, module: str = "torch", also: tuple = (),
              export: bool = True, name: str | None = None, aliases: tuple = (),
              torch_name: str | None = None, dtypes=None):
    """Declare an op built from other ops (no rule: they record their own nodes): the
    function is registered as it is, with its method and export (and, as `defop`'s,
    numpy's `axis=`/`keepdims=` accepted for its `dim`/`keepdim` parameters). `dtypes`:
    as `defop`'s, checked on the first parameter (a Tensor) before the body runs."""
    def declare(f):
        return _declare(f, None, None, None, method, (module, *also), export, name, aliases,
                        False, None, False, torch_name, composite=True, dtypes=dtypes)
    return declare if fn is None else declare(fn)


def _declare(forward, formula, kernel, inputs, method, modules, export, name, aliases, quiet,
             cost, threaded, torch_name, composite, sizes=None, shapes_only=False, unsaved=(),
             dtypes=None, promote=False, int_to_float=False, formula_extras=False):
    """Make `spec` (an `OpDef`), register it, and return its public function."""
    for module in modules:
        if module not in _MODULES:
            raise ValueError(f"defop: unknown module {module!r} (one of {_MODULES})")
    spec = OpDef()
    spec.name = name or forward.__name__
    spec.forward = forward
    spec.module, spec.modules = modules[0], modules
    spec.export, spec.composite = export, composite
    spec.method = (spec.name if method is True else method) or None
    spec.cost, spec.threaded = cost, threaded
    spec.torch_name = torch_name or spec.name
    spec.aliases = tuple(aliases)
    spec.family = _family(forward.__module__)
    spec.unsaved = spec.promote = spec.dtypes = spec.rules = spec.joint = None
    spec.promote_where, spec.promote_float = (), False
    spec.formula_extras = formula_extras and not composite
    spec.keeps_ans = True  # whether nodes keep the output (False: no rule reads it)
    spec.unread = ()  # positions in `saved` (1 + k) of the inputs no rule loads
    spec.shapes_only = shapes_only
    spec.nothing = None  # `lean` when the nodes keep none of ans and the inputs
    spec.inputs_only = False  # `lean` drops the output only
    spec.lean = None
    sig = _forward_signature(spec, forward, composite)
    if composite:
        _declare_composite(spec, forward, sig, dtypes)
    else:
        _declare_rules(spec, list(sig.parameters), sig, formula, kernel, inputs, unsaved)
        if quiet:
            spec.forward = _quiet(spec.forward)
            spec.kernels = _quiet_rules(spec.kernels)
        spec.rules = spec.kernels if type(spec.kernels) is tuple else None
        spec.joint = spec.kernels.fn if type(spec.kernels) is Joint else None
        spec.n_rules = sum(r is not None for r in spec.rules or ())
        _promotion(spec, promote, int_to_float)
        _dtype_support(spec, dtypes)
        spec.lean = None if spec.formulas is None else _lean_plan(spec)
        spec.fn = _generate(spec, sig, forward, sizes)
    REGISTRY.append(spec)
    spec.fn.op = spec
    return spec.fn


def _forward_signature(spec: OpDef, forward, composite: bool) -> inspect.Signature:
    """The public signature: the forward's, without `needs_input_grad` (`spec.needs`)."""
    sig = inspect.signature(forward)
    spec.needs = _NEEDS in sig.parameters and not composite
    if spec.needs:
        if sig.parameters[_NEEDS].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"defop {spec.name}: {_NEEDS} must be a keyword-only parameter")
        sig = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != _NEEDS])
    return sig


def _declare_composite(spec: OpDef, forward, sig: inspect.Signature, dtypes) -> None:
    spec.variadic = spec.by_name = spec.plain = spec.has_kernel = False
    spec.inputs, spec.params, spec.tensor_params = (), (), ()
    spec.formulas = spec.kernels = None
    spec.dtypes = None if dtypes is None else supported(dtypes)
    spec.fn = _aliased(forward, sig)
    if spec.dtypes is not None:
        spec.fn = _dtype_checked(spec.fn, sig, spec.name, spec.dtypes)


def _declare_rules(spec: OpDef, names: list, sig: inspect.Signature, formula, kernel, inputs,
                   unsaved) -> None:
    """A defop's inputs, parameters, rules and what its nodes keep (`spec` fields)."""
    spec.variadic = inputs is not None and len(inputs) == 1 and inputs[0].startswith("*")
    if spec.variadic:
        inputs = (inputs[0][1:],)
        if not isinstance(formula, Joint):
            raise TypeError(f"defop {spec.name}: a sequence of inputs takes a Joint formula")
    spec.inputs = tuple(inputs) if inputs is not None else tuple(names[:1])
    unknown = [n for n in spec.inputs if n not in names]
    if unknown:
        raise TypeError(f"defop {spec.name}: inputs {unknown} are not parameters")
    spec.params = tuple(n for n in names if n not in spec.inputs)
    spec.by_name = list(spec.inputs) != names[:len(spec.inputs)]
    spec.plain = not (spec.variadic or spec.by_name or spec.needs)
    spec.tensor_params = tuple(n for n in spec.params
                               if "Tensor" in str(sig.parameters[n].annotation))
    spec.formulas, spec.kernels, spec.has_kernel = _rules(spec, formula, kernel)
    spec.unsaved = _unsaved(spec, unsaved)
    spec.keeps_ans = (spec.formulas is None or _any_reads_ans(formula, kernel) or
                      0 in (spec.unsaved or ()))  # (declared unsaved: a placeholder)
    spec.unread = _unread_inputs(spec, formula, kernel)


def _promotion(spec: OpDef, promote, int_to_float: bool) -> None:
    """Set `spec.promote` from defop's `promote=` and `int_to_float=`."""
    if not promote and not int_to_float:
        return
    if spec.variadic:
        raise TypeError(f"defop {spec.name}: promote/int_to_float take named inputs, not a "
                        f"sequence of them")
    names = spec.inputs if promote in (True, False, "same") else tuple(promote)
    unknown = [n for n in names if n not in spec.inputs]
    if unknown:
        raise TypeError(f"defop {spec.name}: promote {unknown} are not inputs {spec.inputs}")
    where = tuple(spec.inputs.index(n) for n in names)
    spec.promote_where, spec.promote_float = where, bool(int_to_float) and promote != "same"
    spec.promote = same_dtype_checker(spec.name, where) if promote == "same" else \
        promoter(where, bool(int_to_float))


def _dtype_support(spec: OpDef, dtypes) -> None:
    """Set `spec.dtypes` from defop's `dtypes=` and fold its check into `spec.promote`, the
    step that reads the inputs' dtypes already (ops without `dtypes=` pay nothing)."""
    if dtypes is None:
        return
    spec.dtypes = supported(dtypes)
    spec.promote = dtype_checker(spec.name, 0, spec.dtypes, spec.promote)


def _dtype_checked(fn, sig: inspect.Signature, name: str, allowed: frozenset):
    """A composite whose first parameter, a Tensor of a dtype not in `allowed`, is
    refused (`defop(dtypes=)`) before its body runs."""
    first = next(iter(sig.parameters))

    @functools.wraps(fn)
    def composite_op(*args, **kwargs):
        x = args[0] if args else kwargs.get(first)
        if isinstance(x, Tensor) and x._data.dtype not in allowed:
            raise not_implemented(name, x._data.dtype)
        return fn(*args, **kwargs)
    composite_op.__signature__ = sig
    composite_op.unchecked = fn  # for the library's own calls on other dtypes
    return composite_op


def placeholder(a):
    """What a node keeps of an array no rule reads (`defop(unsaved=)`): zeros of its shape
    and dtype holding one element (a read-only, zero-strided view); anything else as it is."""
    if type(a) is not np.ndarray:
        return a
    key = (a.shape, a.dtype)
    p = _PLACEHOLDERS.get(key)
    if p is not None:  # (on the path of add, sub...: a dict lookup, no new array)
        return p
    zero = _ZERO.get(a.dtype)
    if zero is None:  # one per dtype, shared (read only); a race makes two, both right
        zero = np.zeros(1, a.dtype)
        zero.flags.writeable = False
        _ZERO[a.dtype] = zero
    p = np.ndarray(a.shape, a.dtype, zero, 0, (0,) * a.ndim)
    if len(_PLACEHOLDERS) >= 4096:  # a bound on shapes seen (thread safe: dict operations)
        _PLACEHOLDERS.clear()
    _PLACEHOLDERS[key] = p
    return p


_ZERO: dict = {}
_PLACEHOLDERS: dict = {}  # (shape, dtype) -> a placeholder: read only, so shared


def _family(module: str) -> str:
    """An op's family: its module under ops/ or nn/ (a package's name for the modules
    inside it), without the leading underscore of a private module (nn/_norms.py: norms)."""
    for layer in (".ops.", ".nn."):
        if layer in module:
            module = module.split(layer, 1)[1]
            break
    return module.split(".")[0].lstrip("_")


def _unsaved(spec: OpDef, names) -> frozenset | None:
    """The positions in a node's `saved` (the result's 0, input k's 1 + k) of `names`."""
    if not names:
        return None
    where = {"result": 0, **{n: 1 + k for k, n in enumerate(spec.inputs)}}
    unknown = [n for n in names if n not in where]
    if unknown:
        raise TypeError(f"defop {spec.name}: unsaved {unknown} are neither 'result' nor "
                        f"inputs {spec.inputs}")
    return frozenset(where[n] for n in names)


def _reads_ans(fn) -> bool:
    """Whether rule `fn(g, ans, ...)` may read `ans`'s values: False only when its code
    never loads its second parameter (or the `*args` holding it), nor hands it to a nested
    function; anything else (no code object: a builtin, a partial) counts as reading. A rule
    that passes `ans` on names the function that reads it as `fn.ans_read_by`
    (`forms.piecewise`: the kernel)."""
    inner = getattr(fn, "ans_read_by", None)
    if inner is not None:
        return _reads_ans(inner)
    return _reads_arg(fn, 1)


def _reads_arg(fn, k: int) -> bool:
    """Whether `fn` may read its positional argument `k` (`_reads_ans`'s test): False only
    when its code never loads that parameter (or the `*args` holding it) nor hands it to a
    nested function. A bound method, a builtin or a partial counts as reading."""
    code = getattr(fn, "__code__", None)
    if code is None or inspect.ismethod(fn):
        return True
    if code.co_argcount > k:
        name = code.co_varnames[k]
    elif code.co_flags & inspect.CO_VARARGS:  # `lambda g, *_:` (ans inside *_)
        name = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
    else:
        return True
    if name in code.co_cellvars:
        return True
    for ins in dis.get_instructions(code):
        if "LOAD" in ins.opname and (ins.argval == name or
                                     (isinstance(ins.argval, tuple) and name in ins.argval)):
            return True
    return False


def _unread_inputs(spec: OpDef, formula, kernel) -> tuple:
    """The positions in a node's `saved` (1 + k) of the inputs no declared rule (formula or
    kernel, every input's) may read (`_reads_arg`): the node keeps None there, so it keeps
    no memory of them alive and checks not their version counters (`_read_counters`): a
    write into such an input leaves the node valid, as PyTorch's nodes that do not save it
    (`add`'s). A sequence of inputs (cat) is kept as it is."""
    if spec.formulas is None or spec.variadic:
        return ()
    rules = _declared_rules(formula, kernel)  # (a piecewise formula loads all: `*inputs`)
    return tuple(1 + k for k in range(len(spec.inputs))
                 if not any(_reads_arg(r, 2 + k) for r in rules))


def _declared_rules(formula, kernel) -> list:
    """Every rule function declared in `formula` and `kernel` (a function, a tuple of them
    with None entries, or a `Joint`)."""
    rules = []
    for r in (formula, kernel):
        if isinstance(r, Joint):
            rules.append(r.fn)
        elif isinstance(r, tuple):
            rules.extend(f for f in r if f is not None)
        elif r is not None:
            rules.append(r)
    return rules


def _any_reads_ans(formula, kernel) -> bool:
    """Whether any of an op's declared rules may read its output (`_reads_ans`): if none
    does, the node keeps no output, and writing into the output in place (`y.add_(1)`)
    leaves the node valid, as PyTorch's nodes that save no result."""
    return any(_reads_ans(f) for f in _declared_rules(formula, kernel))


def _rules(spec: OpDef, formula, kernel):
    """(formulas, the kernels the Node runs, whether any kernel was declared)."""
    if formula is None:
        if kernel is not None:
            raise TypeError(f"defop {spec.name}: a kernel without a formula (the formula "
                            f"is the derivative; the kernel only a faster first order)")
        return None, None, False
    n = len(spec.inputs)
    every = None if spec.formula_extras else n  # (`_on_arrays`: the extras too, or not)
    if isinstance(formula, Joint):
        if kernel is not None and not isinstance(kernel, Joint):
            raise TypeError(f"defop {spec.name}: a Joint formula takes a Joint kernel")
        if kernel is None:  # (a sequence of inputs: every saved array is one)
            run = _on_arrays(formula.fn, None if spec.variadic else every, joint=True)
        else:
            run = kernel.fn
        return formula, Joint(run), kernel is not None
    formulas = formula if isinstance(formula, tuple) else (formula,)
    if kernel is None:
        kernels = (None,) * n
    else:
        kernels = kernel if isinstance(kernel, tuple) else (kernel,)
    if len(formulas) != n or len(kernels) != n:
        raise TypeError(f"defop {spec.name}: {n} inputs {spec.inputs}, {len(formulas)} "
                        f"formulas and {len(kernels)} kernels (one each, None for none)")
    for f, k, i in zip(formulas, kernels, spec.inputs):
        if f is None and k is not None:
            raise TypeError(f"defop {spec.name}: a kernel for {i!r} without its formula")
    run = tuple(k if k is not None else (None if f is None else _on_arrays(f, every))
                for f, k in zip(formulas, kernels))
    return formulas, run, any(k is not None for k in kernels)


def _quiet(fn):
    def quiet(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(*args, **kwargs)
    quiet.__name__ = quiet.__qualname__ = getattr(fn, "__name__", "quiet")
    quiet.__module__ = getattr(fn, "__module__", __name__)   # the op's family (`_family`)
    quiet.formula = getattr(fn, "formula", None)
    return quiet


def _quiet_rules(kernels):
    if isinstance(kernels, Joint):
        return Joint(_quiet(kernels.fn))
    return None if kernels is None else tuple(None if k is None else _quiet(k)
                                              for k in kernels)


def _on_arrays(formula, n: int, joint: bool = False):
    """A first-order rule from a formula: the formula run on the saved arrays themselves.
    Its operators are then numpy's, and the ops it calls return Tensors without history
    (none of their arguments requires grad), unwrapped here; formulas use operators and
    functions, not Tensor methods, so they run on either. The saved extras (`Saved`) are
    the kernels'; a formula sees `(g, ans, *inputs)` (n None: every saved value, the
    extras too: a sequence of inputs, or `formula_extras`)."""
    def rule(g, *saved, **params):
        r = formula(g, *(saved if n is None else saved[:n + 1]), **params)
        if joint:
            return tuple(None if x is None else _array(x) for x in r)
        return _array(r)
    rule.formula = formula
    return rule


def _array(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _generate(spec: OpDef, sig: inspect.Signature, fwd, sizes: str | None = None):
    """The public function: `spec`'s signature, a body that runs `spec` (`_fast_body`, or
    `OpDef.__call__`). Generated as source (as `dataclasses` does) so the call costs no
    argument binding and `inspect.signature` shows the real parameters."""
    params = list(sig.parameters.values())
    _check_parameters(spec, params, sizes)
    names = [p.name for p in params]
    aliases = {a: n for a, n in _ARG_ALIASES.items() if n in names}
    required = _required_aliased(params, set(aliases.values()))
    namespace = {"_op": spec.__call__, "_Tensor": Tensor, "_required": _REQUIRED,
                 "_defaults": {p.name: _REQUIRED if p.name in required else p.default
                               for p in params}, "_sequence": _sequence}
    fast = _fast_body(spec, namespace)
    if fast is None:
        args = f"*_sequence({spec.inputs[0]!r}, {spec.inputs[0]}), " if spec.variadic else \
            "".join(f"{n}, " for n in spec.inputs)
        fast = f"    return _op(({args}), {_params_dict(spec)})\n"
    src = (f"def {spec.name}({', '.join(_head(params, sizes, aliases))}):\n"
           f"{_prologue(spec, aliases, required, sizes)}{fast}")
    # named inside the package, so tracebacks and anomaly detection count it as library code
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"<defop {spec.name}>")
    exec(compile(src, where, "exec"), namespace)  # noqa: S102
    fn = namespace[spec.name]
    fn.__defaults__ = (_REQUIRED,) * len(required) + (fwd.__defaults__ or ()) or None
    fn.__kwdefaults__ = {k: v for k, v in (fwd.__kwdefaults__ or {}).items()
                         if k != _NEEDS} or None
    fn.__annotations__ = {k: v for k, v in fwd.__annotations__.items() if k != _NEEDS}
    fn.__doc__ = fwd.__doc__
    fn.__module__ = fwd.__module__
    fn.__qualname__ = fwd.__qualname__
    if aliases or sizes is not None:
        fn.__signature__ = sig  # PyTorch's parameters; the aliases are not shown
    return fn


def _check_parameters(spec: OpDef, params: list, sizes: str | None) -> None:
    """The forward's parameters are ones a generated function can take."""
    for p in params:
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name.startswith("_"):
            raise TypeError(f"defop {spec.name}: parameter name {p.name!r} not supported")
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"defop {spec.name}: *args/**kwargs are not supported (declare "
                            f"a composite that calls the op)")
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    if sizes is not None and (not positional or positional[-1] != sizes):
        raise TypeError(f"defop {spec.name}: sizes={sizes!r} must name the last positional "
                        f"parameter")


def _head(params: list, sizes: str | None, aliases: dict) -> list:
    """The generated function's parameter list (defaults: its `__defaults__`)."""
    head = []
    kinds_seen = set()
    for k, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and p.KEYWORD_ONLY not in kinds_seen and sizes is None:
            head.append("*")
        kinds_seen.add(p.kind)
        head.append(p.name)
        if p.name == sizes:
            head.append("*_sizes")
        if p.kind is p.POSITIONAL_ONLY and (k == len(params) - 1 or
                                            params[k + 1].kind is not p.POSITIONAL_ONLY):
            head.append("/")
    if aliases:  # numpy's names, as torch's functions accept them: axis= for dim= ...
        head.append("**_aliases")
    return head


def _prologue(spec: OpDef, aliases: dict, required: tuple, sizes: str | None) -> str:
    """The generated function's first lines: numpy's argument names, spread sizes, the
    required parameters that have an alias, the Tensor parameters unwrapped."""
    src = "".join(
        f"    if {a!r} in _aliases:\n"
        f"        if {n} is not _defaults[{n!r}]:\n"
        f"            raise TypeError(\"{spec.name}() got both {n!r} and its alias {a!r}\")\n"
        f"        {n} = _aliases.pop({a!r})\n" for a, n in aliases.items())
    if aliases:
        src += (f"    if _aliases:\n        raise TypeError(f\"{spec.name}() got an unexpected "
                f"keyword argument {{next(iter(_aliases))!r}}\")\n")
    if sizes is not None:  # reshape(x, 2, 3): the ints spread
        src += f"    if _sizes:\n        {sizes} = ({sizes}, *_sizes)\n"
    src += "".join(f"    if {n} is _required:\n        raise TypeError(\"{spec.name}() missing "
                   f"1 required positional argument: '{n}'\")\n" for n in required)
    src += "".join(f"    if isinstance({n}, _Tensor):\n        {n} = {n}._data\n"
                   for n in spec.tensor_params)
    return src


def _params_dict(spec: OpDef) -> str:
    """The source of the op's parameters by name (a dict literal), or `None`."""
    if not spec.params:
        return "None"
    return "{" + ", ".join(f"{n!r}: {n}" for n in spec.params) + "}"


def _fast_body(spec: OpDef, namespace: dict) -> str | None:
    """The body of a plain differentiable op's function, specialised at declaration: each
    input unwrapped by name, the dtype step skipped by one test when the inputs already
    share a dtype it accepts (`_dtype_test`), the forward called with the parameters by
    name, what the node keeps written out (`lean`), then `_record_op`. A result that is
    not an array (`Saved`, a number) goes through `OpDef._finish`. None for the other ops
    (a sequence of inputs, inputs by name, `needs_input_grad`, no rule): `OpDef.__call__`."""
    if spec.variadic and not spec.needs:
        return _sequence_body(spec, namespace)
    if not spec.plain:
        return None
    arrays = [f"_a{k}" for k in range(len(spec.inputs))]
    lines = [f"    {a} = {n}._data if isinstance({n}, _Tensor) else {n}\n"
             for a, n in zip(arrays, spec.inputs)]
    if spec.promote is not None:
        test = _dtype_test(spec, arrays, namespace)
        many = ", ".join(arrays)
        lines.append(f"    if not ({test}):\n        {many}, = _promote([{many}])\n")
    call = ", ".join(arrays + [f"{n}={n}" for n in spec.params])
    lines.append(f"    try:\n        _ans = _forward({call})\n    except ValueError as _e:\n"
                 f"        _named(_e, {spec.name!r})\n        raise\n")
    namespace.update(_promote=spec.promote, _forward=spec.forward, _named=_named,
                     _ndarray=np.ndarray, _finish=spec._finish, _spec=spec, _cost=spec.cost,
                     _unrecorded=_unrecorded, _Saved=Saved,
                     _record=_record_one if len(arrays) == 1 else _record_op)
    return "".join(lines) + _recording_source(spec, arrays, call, namespace)


def _recording_source(spec: OpDef, arrays: list, call: str, namespace: dict) -> str:
    """`_fast_body`'s last lines: the forward's result `_ans` recorded; `Saved` unpacked
    (its extras kept after the lean plan's entries); anything else through `_finish`."""
    inputs = "(" + "".join(f"{n}, " for n in spec.inputs) + ")"
    params = _params_dict(spec)
    other = f"        return _finish({inputs}, [{', '.join(arrays)}], _ans, {params})\n"
    if spec.kernels is None:  # (no gradient: a Tensor sharing the counter of one it views)
        return (f"    if type(_ans) is not _ndarray:\n{other}"
                f"    return _unrecorded(_ans, {inputs})\n")
    cost = f"_cost(_ans, {call})" if spec.cost is not None else "None"
    saved = _saved_source(spec, arrays, namespace)
    first = inputs if len(arrays) > 1 else spec.inputs[0]  # (`_record_one`: the input)
    record = f"_record(_spec, _ans, {first}, ({saved}<extras>), {params}, {cost})\n"
    return (f"    if type(_ans) is not _ndarray:\n"
            f"        if type(_ans) is not _Saved or type(_ans.out) is not _ndarray:\n"
            f"    {other}"
            f"        _extras = _ans.extras\n        _ans = _ans.out\n"
            f"        return {record.replace('<extras>', '*_extras')}"
            f"    return {record.replace('<extras>', '')}")


def _sequence_body(spec: OpDef, namespace: dict) -> str:
    """`_fast_body` of an op taking a sequence of inputs (cat, stack): the forward gets
    their arrays as a list; the node keeps the output's entry of `lean`, then the arrays
    (their stand-ins under `shapes_only`)."""
    name = spec.inputs[0]
    call = ", ".join(["_arrays"] + [f"{n}={n}" for n in spec.params])
    params = _params_dict(spec)
    cost = f"_cost(_ans, *_arrays, {call[len('_arrays, '):]})" if spec.cost is not None \
        else "None"
    head = spec.lean[0] if spec.lean is not None else _KEEP
    head = "None" if head is None else "_ans" if head is _KEEP else "_keep0(_ans)"
    rest = "*[_keep1(a) if type(a) is _ndarray else a for a in _arrays]" if spec.shapes_only \
        else "*_arrays"
    tail = (f"    return _record(_spec, _ans, _inputs, ({head}, {rest}), {params}, {cost})\n"
            if spec.kernels is not None else "    return _unrecorded(_ans, _inputs)\n")
    namespace.update(_forward=spec.forward, _named=_named, _ndarray=np.ndarray,
                     _finish=spec._finish, _record=_record_op, _spec=spec, _cost=spec.cost,
                     _unrecorded=_unrecorded, _keep1=_stand_in,
                     _keep0=spec.lean[0] if spec.lean is not None else None)
    return (f"    _inputs = _sequence({name!r}, {name})\n"
            f"    _arrays = [x._data if isinstance(x, _Tensor) else x for x in _inputs]\n"
            f"    try:\n        _ans = _forward({call})\n    except ValueError as _e:\n"
            f"        _named(_e, {spec.name!r})\n        raise\n"
            f"    if type(_ans) is not _ndarray:\n"
            f"        return _finish(_inputs, _arrays, _ans, {params})\n{tail}")


def _saved_source(spec: OpDef, arrays: list, namespace: dict) -> str:
    """The source of what the node keeps of `(ans, *inputs)` (the items of a tuple):
    `OpDef._lean`'s plan written out (the output or an input, None, or a stand-in)."""
    plan = spec.lean if spec.lean is not None else (_KEEP,) * (1 + len(arrays))
    items = []
    for k, (how, a) in enumerate(zip(plan, ["_ans", *arrays])):
        if how is None:
            items.append("None")
        elif how is _KEEP:
            items.append(a)
        else:
            namespace[f"_keep{k}"] = how
            items.append(f"(_keep{k}({a}) if type({a}) is _ndarray else {a})")
    return "".join(f"{i}, " for i in items)


def _dtype_test(spec: OpDef, arrays: list, namespace: dict) -> str:
    """The source of a test that `spec.promote` would return the arrays unchanged: those it
    promotes are arrays of one dtype among the common ones (`dtypes.FAST`) it would accept
    (floating with `int_to_float`; in `dtypes=` for the first input), and the first input,
    when `dtypes=` checks it, is an array of such a dtype."""
    fast = FAST if not spec.promote_float else frozenset(d for d in FAST if d.kind in "fc")
    where = spec.promote_where
    checked = spec.dtypes is not None
    terms = [f"type({arrays[i]}) is _ndarray" for i in where]
    terms += [f"{arrays[where[0]]}.dtype is {arrays[i]}.dtype" for i in where[1:]]
    if checked and 0 in where:
        fast = fast & spec.dtypes
    elif checked:
        terms.append(f"type({arrays[0]}) is _ndarray and {arrays[0]}.dtype in _allowed")
        namespace["_allowed"] = spec.dtypes & FAST
    if where:
        terms.append(f"{arrays[where[0]]}.dtype in _fast")
    namespace["_fast"] = fast
    return " and ".join(terms) or "False"


def _sequence(name: str, value) -> tuple:
    """A sequence-of-tensors parameter (cat's `tensors`) as a tuple; TypeError otherwise."""
    if isinstance(value, (Tensor, np.ndarray, str)) or not hasattr(value, "__iter__"):
        raise TypeError(f"argument {name!r} must be a sequence of Tensors, not "
                        f"{type(value).__name__}")
    return tuple(value)


# numpy's argument names that torch's functions accept for theirs (torch.sum(x, axis=0))
_ARG_ALIASES = {"axis": "dim", "keepdims": "keepdim"}
_REQUIRED = object()  # the default of a required parameter that may come by its alias


def _required_aliased(params: list, targets: set) -> tuple:
    """The required positional parameters that have an alias (`logsumexp(x, axis=1)`) and
    may take a placeholder default: those followed only by parameters with defaults (or
    other such ones). The generated function checks they were given."""
    out = []
    for p in reversed([p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                        p.POSITIONAL_OR_KEYWORD)]):
        if p.default is not p.empty:
            continue
        if p.name not in targets:
            break
        out.append(p.name)
    return tuple(out)


def _aliased(fn, sig: inspect.Signature):
    """A composite that takes numpy's names for its `dim`/`keepdim` parameters too, as a
    declared op does (`x.max(axis=1)`); `fn` itself when it has neither."""
    aliases = {a: n for a, n in _ARG_ALIASES.items() if n in sig.parameters}
    if not aliases:
        return fn

    @functools.wraps(fn)
    def composite_op(*args, **kwargs):
        for a, n in aliases.items():
            if a in kwargs:
                if n in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {n!r} and its alias {a!r}")
                kwargs[n] = kwargs.pop(a)
        return fn(*args, **kwargs)
    composite_op.__signature__ = sig  # PyTorch's parameters; the aliases are not shown
    return composite_op


# ---- the extension API ----------------------------------------------------------------------
def _owns(root) -> bool:
    """`root` (an array's base) owns its memory: an array viewing it views nothing
    else, and the identity tests of `_shared_counter` saw every input that shares it."""
    return type(root) is np.ndarray and root.flags.owndata


def primitive(name: str, forward, *vjps, cost=None, threaded: bool = False):
    """Make an op from `forward(*arrays, **kwargs)` and one first-order rule per positional
    input, `rule(g, ans, *arrays, **kwargs)` (None: no gradient there). Not registered.

    `cost(ans, *arrays)` estimates backward work (about ns on one core) for the
    cost model (`engine/cost.py`); the default is the output's size. `threaded=True` marks
    ops whose rules call multithreaded kernels (BLAS). A rule may carry a differentiable
    form as `rule.graph(g, ans, *inputs, **kwargs)` (Tensor ops) for create_graph.
    """
    def op(*args, **kwargs) -> Tensor:
        arrays = [a._data if isinstance(a, Tensor) else a for a in args]
        try:
            ans = forward(*arrays, **kwargs)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from e
        if type(ans) is not np.ndarray:
            ans = np.asarray(ans)
        return record(name, ans, args, vjps, (ans, *arrays), kwargs or None, None,
                      None if cost is None else cost(ans, *arrays), threaded)

    op.__name__ = name
    op.__qualname__ = name
    op.vjps = vjps
    return op
