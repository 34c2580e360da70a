"""`Optimizer`: the base class of `pa.optim`'s optimizers, with torch.optim's interface.

Parameter groups, per-parameter state, `zero_grad`, `step(closure)` and
`state_dict()` / `load_state_dict()` behave like PyTorch's. A subclass validates its
hyperparameters (`_check_group`), names its state arrays (`_state_keys`) and updates one
parameter (`_update`); the base class updates each parameter's array in place (`p._data`,
the memory `p.data` and views share) and bumps its version counter once
(`parallel_autograd.version.bump`), so a graph that saved the old values refuses to run
backward, as after PyTorch's in-place updates.

A step is all or nothing. Before the first write it checks every gradient, every group's
hyperparameters and every parameter's state (`_check_state`: the arrays the step updates
exist and have the parameter's shape and dtype, `"step"` is a finite count), and
allocates the state a first step makes and every thread's scratch buffers; a failure
there changes nothing (PyTorch's step fails on such state halfway, after updating the
parameters before the bad one). The writes then run with Ctrl+C held back
(`locks.InterruptsDeferred`, the engine's write-back deferral): a SIGINT arriving
meanwhile raises KeyboardInterrupt once every parameter and state is updated and every
thread of the step has finished, never while a thread still writes. Floating-point
errors under `np.errstate` are handled after the writes too (`fperrors`, in the order a
one-thread step meets them): under "raise" the step completes (numpy's in-place ufuncs
also write their output before raising) and then raises numpy's FloatingPointError. What
remains: a bug in a subclass's `_update` raising midway, or the process being killed.
`load_state_dict` casts state arrays of real numbers to the parameter's dtype as PyTorch
does, refuses the rest and checks the state as `step` will, changing nothing on error.

A large step runs on several threads: when the parameters to update hold at least
`Optimizer.parallel_min_elements` elements (2**18) and the process may use more than one
core, they are dealt to up to that many threads (largest first, each to the least loaded),
the caller running one share. numpy releases the GIL in the elementwise passes, and each
parameter's update is independent of the others, so the results are bitwise those of one
thread. Measured 2026-11-23 (2 cores, Adam, the benchmark's parameters after a backward
pass): wide-elementwise's 65 parameters (6.6M elements) 38.8 -> 19.6 ms a step; after a
backward pass full of GEMMs (mlp-chain, attention, wide-matmul) no gain on that machine,
whose second core OpenBLAS's threads keep busy for a while after their last GEMM.

Thread safety: an optimizer is not locked. Call its methods from one thread at a time,
and do not step while a backward call may write the same `.grad` arrays (the step reads
them without the engine's gradient locks). `zero_grad` writes each `.grad` under the
engine's lock for that tensor. The threads of one step each have their own scratch
buffers and run under the caller's `np.errstate`; the step returns (or raises, a
Ctrl+C included) only after all of them finished.
"""
from __future__ import annotations

import copy
import math
import numbers
import os
import threading
from collections import defaultdict
from itertools import chain
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from .. import dtypes as D
from .. import fperrors, locks, version
# the engine's write-back deferral of Ctrl+C, reused so that both work the same way
from ..locks import InterruptsDeferred
from ..grad_mode import enable_grad
from ..tensor import Tensor
from ._blocks import BLOCK_BYTES, Scratch

ParamsT = Union[Iterable[Tensor], Iterable[dict], Iterable[tuple]]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _deal(work: list, n: int) -> list[list]:
    """`work` items `(group, p, g)` dealt to `n` shares, largest first, each to the
    share with the fewest elements so far (sizes within one largest item)."""
    shares: list[list] = [[] for _ in range(n)]
    loads = [0] * n
    for item in sorted(work, key=lambda w: -w[1]._data.size):
        i = loads.index(min(loads))
        shares[i].append(item)
        loads[i] += item[1]._data.size
    return [s for s in shares if s]


def _reserve(scratch: Scratch, share: list) -> None:
    """Allocate the scratch buffers `_blocks.blocks` will take for each parameter of
    `share` (so that no allocation can fail once the step writes)."""
    need: dict[np.dtype, int] = {}
    for item in share:
        arr = item[1]._data
        n = min(BLOCK_BYTES // arr.itemsize or 1, arr.size)
        if n > need.get(arr.dtype, -1):
            need[arr.dtype] = n
    for dtype, n in need.items():
        scratch.get(dtype, n)


def _is_flag(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def check_real(owner: str, name: str, value: Any, low: float = 0.0,
               high: Optional[float] = None, high_open: bool = False) -> None:
    """Raise TypeError unless `value` is a real number (not a bool), ValueError unless
    it is finite and `low <= value` (and `value <= high`, or `< high` if `high_open`).
    The message names `owner`'s argument `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    bad = not np.isfinite(value) or not low <= value
    if high is not None:
        bad = bad or not (value < high if high_open else value <= high)
    if bad:
        hi = "" if high is None else f" and {'<' if high_open else '<='} {high}"
        raise ValueError(f"{owner}: invalid {name}: {value!r} (it must be >= {low}{hi})")


def check_flag(owner: str, name: str, value: Any) -> None:
    """Raise TypeError unless `value` is a bool."""
    if not _is_flag(value):
        raise TypeError(f"{owner}: {name} must be True or False, got {value!r}")


class Optimizer:
    """Base class of the optimizers: holds `param_groups` (a list of dicts, each with
    `"params"`, a list of tensors, and the group's hyperparameters), `defaults` (the
    hyperparameters a group gets unless it sets its own) and `state` (per-parameter
    state, a dict keyed by the parameter tensor itself).

    Args:
        params: the tensors to optimize (an iterable of leaf tensors that require grad,
            such as `nn.Parameter`s, or of `(name, tensor)` pairs as
            `named_parameters()` yields), or an iterable of dicts, one per parameter
            group, each with `"params"` and any hyperparameters overriding `defaults`.
        defaults: the default hyperparameters.

    Raises:
        TypeError: `params` is a single tensor, a set, a dict, or holds something that is
            not a Tensor; a hyperparameter has the wrong type.
        ValueError: `params` is empty; a parameter is not a leaf, does not require grad
            or appears twice; a hyperparameter is out of range.

    Thread safety: not locked; see the module docstring.
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(f"{name}: params must be an iterable of Tensors or of dicts, "
                            f"got a single Tensor (wrap it in a list: [param])")
        if isinstance(params, (dict, set, str)):
            raise TypeError(f"{name}: params must be an ordered iterable (a list) of "
                            f"Tensors or of param-group dicts, got a {type(params).__name__}")
        self.defaults = dict(defaults)
        _check_impl_flags(name, self.defaults)
        self._check_group(self.defaults)
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        self._local = threading.local()
        self._opt_called = False
        self._made: dict[Tensor, dict[str, Any]] = {}  # what the running step made
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    parallel_min_elements: int = 1 << 18
    """A step updating at least this many elements runs on several threads (0: always
    when there are several cores; a huge value: never)."""

    @property
    def _scratch(self) -> Scratch:
        """The calling thread's scratch buffers (one set per thread of a step)."""
        s = getattr(self._local, "scratch", None)
        if s is None:
            s = self._local.scratch = Scratch()
        return s

    # --- subclass interface ------------------------------------------------------
    _counts_steps: bool = True
    """Whether the per-parameter state holds a `"step"` count (SGD's does not)."""

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate a group's hyperparameters (raise TypeError/ValueError naming the
        argument). Subclasses override."""

    def _state_keys(self, group: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The names of the state arrays a step of `group` updates: `(required,
        optional)`. A parameter's state is empty before its first step (the step makes
        `"step"` and every array); after, it must hold every required array, and an
        optional one that is missing or None is made (e.g. a momentum turned on later).
        Subclasses override."""
        return (), ()

    def _initial(self, p: Tensor, group: dict[str, Any], key: str) -> np.ndarray:
        """A new state array `key` for `p` (zeros of its shape and dtype; subclasses
        override for other starting values)."""
        return np.zeros(p._data.shape, p._data.dtype)

    def _update(self, p: Tensor, grad: np.ndarray, group: dict[str, Any]) -> None:
        """Update `p._data` (the array) and `self.state[p]` in place from `grad` with `group`'s
        hyperparameters. Called only once everything was checked and the state is
        complete (`_state_keys`; `self._made.get(p)`: the entries this step made); it
        must not fail. The base class bumps `p`'s version counter afterwards.
        Subclasses override."""
        raise NotImplementedError

    # --- parameter groups --------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group (a dict with `"params"` and optional hyperparameters;
        the missing ones are filled in from `defaults`), e.g. to train layers unfrozen
        later. Validates everything before changing anything: on error neither the
        optimizer nor `param_group` is modified.

        Raises:
            TypeError: not a dict, a parameter is not a Tensor, a set of parameters.
            ValueError: no "params", a parameter is not a leaf, does not require grad or
                is already in a group; a hyperparameter is out of range.
        """
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{name}: a param group must be a dict, got "
                            f"{type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(f"{name}: a param group needs a 'params' entry")
        group = dict(param_group)
        params, names = self._extract_params(group["params"])
        group["params"] = params
        if names is not None:
            group["param_names"] = names
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self._check_group(group)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{name}: some parameters appear in more than one parameter "
                             f"group")
        param_group.clear()
        param_group.update(group)
        self.param_groups.append(param_group)

    def _extract_params(self, params: Any) -> tuple[list[Tensor], Optional[list[str]]]:
        """The group's tensors as a list (and their names when given as pairs), checked:
        Tensors, leaves, requiring grad, no duplicates."""
        name = type(self).__name__
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(f"{name}: parameters must be in an ordered collection (a list), "
                            f"not a set, whose order changes between runs")
        params = list(params)
        pairs = [isinstance(p, tuple) for p in params]
        if any(pairs) and not all(pairs):
            raise ValueError(f"{name}: give all parameters with names or all without")
        names = [p[0] for p in params] if params and all(pairs) else None
        tensors = [p[1] for p in params] if names is not None else params
        ids = set()
        for i, p in enumerate(tensors):
            where = f"parameter {i}" + (f" ({names[i]!r})" if names else "")
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: can only optimize Tensors, but {where} is a "
                                f"{type(p).__name__}")
            if p.grad_fn is not None:
                raise ValueError(f"{name}: can't optimize a non-leaf Tensor ({where} has "
                                 f"grad_fn={p.grad_fn.name}); optimize the leaves it was "
                                 f"computed from")
            if not p.requires_grad:
                raise ValueError(f"{name}: {where} does not require grad; pass only "
                                 f"trainable tensors ([p for p in params if p.requires_grad])")
            if id(p) in ids:
                raise ValueError(f"{name}: {where} appears twice in the parameter group")
            ids.add(id(p))
        return tensors, names

    # --- gradients and steps ---------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters: set `.grad` to None (the default; the
        next backward allocates a fresh one, and `step` skips a parameter whose `.grad`
        is None) or, with `set_to_none=False`, fill the existing arrays with zeros in
        place (a zero gradient still steps: momentum and weight decay act). Each write
        is made under the engine's lock for that tensor."""
        for group in self.param_groups:
            for p in group["params"]:
                if p._grad is None:
                    continue
                with locks.grad_lock(p):
                    if set_to_none:
                        p._grad = None
                    else:
                        p._zero_grad_in_place()

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Update every parameter whose `.grad` is not None, in place, once.

        All or nothing: everything that can fail is done before the first write (the
        gradients, the state and the hyperparameters are checked, new state and scratch
        buffers allocated); a Ctrl+C that arrives during the writes is delivered when
        every parameter and its state are updated and every thread of the step has
        finished (the engine's write-back deferral), so an interrupted step either
        changed nothing or is complete. Floating-point errors under `np.errstate` are
        handled after the whole step (`fperrors`): under "raise" the step completes,
        then the first error a one-thread run would meet is raised with numpy's message,
        as numpy's in-place ufuncs write their output before raising; under "warn" each
        kind is warned once from the caller.

        Args:
            closure: optional; called first with grad mode on (it should zero the
                gradients, recompute the loss, call backward and return the loss).

        Returns:
            The closure's return value, or None without a closure.

        Raises:
            ValueError: a `.grad` is not an ndarray of the parameter's shape and dtype,
                a parameter's array is read-only, a state array has another shape or
                dtype or is missing, a hyperparameter is out of range.
            TypeError: a state entry or a hyperparameter has the wrong type.
            All raised before any parameter or state is written.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        work, made = self._collect()
        n = min(_cores(), len(work))
        threaded = n > 1 and sum(w[1]._data.size for w in work) >= self.parallel_min_elements
        shares = _deal(work, n) if threaded else [work]
        scratches = [self._scratch] + [Scratch() for _ in shares[1:]]
        for share, scratch in zip(shares, scratches):
            _reserve(scratch, share)
        fpe = fperrors.Deferred()
        with InterruptsDeferred():
            for p, new in made.items():
                self.state[p].update(new)
            self._made = made
            try:
                self._run_shares(shares, scratches, fpe)
            finally:
                self._made = {}
                self._opt_called = True
        fpe.replay(merged=False, stacklevel=2)
        return loss

    def _new_state(self, p: Tensor, group: dict[str, Any],
                   state: Optional[dict[str, Any]]) -> dict[str, Any]:
        """The state entries `p`'s step must make (allocated here, installed by the
        step): everything on the first step, else the optional arrays missing (None)."""
        required, optional = self._state_keys(group)
        new: dict[str, Any] = {}
        if not state:
            if self._counts_steps:
                new["step"] = 0.0
            new.update((k, self._initial(p, group, k)) for k in required)
        new.update((k, self._initial(p, group, k)) for k in optional
                   if (state or {}).get(k) is None)
        return new

    def _run_share(self, share: list, scratch: Scratch, fpe: fperrors.Deferred) -> None:
        self._local.scratch = scratch
        with fpe.recording() as rec:
            for group, p, g, tag in share:
                rec.log.tag = tag  # a one-thread step meets the parameters in this order
                self._update(p, g, group)
                version.bump(p)

    def _run_shares(self, shares: list[list], scratches: list[Scratch],
                    fpe: fperrors.Deferred) -> None:
        """Run the first share here and the others on threads of their own (here too if
        a thread cannot be started); wait for all of them, then raise the first error."""
        errors: list[BaseException] = []

        def run(share, scratch):
            try:
                self._run_share(share, scratch, fpe)
            except BaseException as e:  # noqa: BLE001 - re-raised by the caller
                errors.append(e)

        threads = []
        try:
            for share, scratch in zip(shares[1:], scratches[1:]):
                t = threading.Thread(target=run, args=(share, scratch), name="pa-optim",
                                     daemon=True)
                try:
                    t.start()
                except RuntimeError:  # no more threads: this one does it
                    run(share, scratch)
                    continue
                threads.append(t)
            run(shares[0], scratches[0])
        finally:
            for t in threads:
                t.join()
        if errors:
            raise errors[0]

    def _collect(self) -> tuple[list[tuple[dict[str, Any], Tensor, np.ndarray, int]],
                                dict[Tensor, dict[str, Any]]]:
        """(group, parameter, gradient, position) for each parameter with a gradient,
        after checking the gradients, the groups' hyperparameters and the parameters'
        state (so that anything bad fails the step before any write); and the state
        entries the step must make, per parameter (`_new_state`, allocated here)."""
        work, made = [], {}
        name = type(self).__name__
        for gi, group in enumerate(self.param_groups):
            keys = None
            for pi, p in enumerate(group["params"]):
                g = p._grad  # a Tensor: the step reads its array
                if g is None:
                    continue
                g = g._data
                arr = p._data
                if not (isinstance(g, np.ndarray) and g.shape == arr.shape
                        and g.dtype == arr.dtype and arr.flags.writeable):
                    raise ValueError(self._bad_param(gi, pi, p, g))
                if keys is None:
                    self._check_group(group)
                    _check_step_flags(name, gi, group)
                    keys = self._state_keys(group)
                    where = f"{name}.step: parameter {{}} of group {gi}"
                state = self.state.get(p)
                if state:
                    self._check_state(where, pi, p, keys, state)
                if not state or keys[1] and any(state.get(k) is None for k in keys[1]):
                    made[p] = self._new_state(p, group, state)
                work.append((group, p, g, len(work)))
        return work, made

    def _check_state(self, where: str, key: Any, p: Tensor,
                     keys: tuple[tuple[str, ...], tuple[str, ...]],
                     state: dict[str, Any]) -> None:
        """Raise unless `state` (not empty) is what a step can update: a finite `"step"`
        >= 0 (if `_counts_steps`), and for `keys = _state_keys(group)` every required
        array, and each array the step uses a writeable ndarray of `p`'s shape and
        dtype. The message starts with `where.format(key)`. ~1 us a parameter."""
        if self._counts_steps:
            step = state.get("step")
            if type(step) is not float or not 0.0 <= step < math.inf:  # NaN fails too
                _check_step(where.format(key), state)
        required, optional = keys
        arr = p._data
        shape, dtype = arr.shape, arr.dtype
        for k in required:
            v = state.get(k)
            if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype \
                    or not v.flags.writeable:
                _check_array(where.format(key), k, v, arr, state, False)
        for k in optional:
            v = state.get(k)
            if v is not None and (type(v) is not np.ndarray or v.shape != shape
                                  or v.dtype != dtype or not v.flags.writeable):
                _check_array(where.format(key), k, v, arr, state, True)

    def _bad_param(self, gi: int, pi: int, p: Tensor, g: Any) -> str:
        """The message for a parameter `step` cannot update."""
        where = f"{type(self).__name__}.step: parameter {pi} of group {gi}"
        arr = p._data
        if not arr.flags.writeable:
            return f"{where}: its array is read-only"
        what = (f"{g.dtype} array of shape {g.shape}" if isinstance(g, np.ndarray)
                else type(g).__name__)
        return (f"{where}: .grad must be a {arr.dtype} array of shape {arr.shape} like "
                f"the parameter, got a {what}")

    # --- state dicts -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state in PyTorch's structure: `{"state": {index: {name: value}},
        "param_groups": [{hyperparameters..., "params": [index, ...]}]}`, parameters
        referred to by their index in the order of `param_groups`. The state's arrays are
        Tensors and `"step"` a 0-d float32 Tensor (float64 under a float64 default dtype),
        as PyTorch's; they are copies (later steps do not change a state dict taken
        before, where PyTorch's shares them); `pa.save` can write it."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: {k: _copy_value(k, v) for k, v in s.items()}
                 for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what `state_dict()` returned (or `pa.load` read back): the groups'
        hyperparameters and the per-parameter state, matched to this optimizer's
        parameters by position. Arrays are copied; as in PyTorch, every array of real
        numbers (bool, integer or floating) is cast to the dtype of its floating-point
        parameter, and `"step"` is kept as a number (a float). Then each parameter's
        state is checked as `step` will check it (`_check_state`), so that a state dict
        `step` could not use is refused here, with nothing changed.

        Raises:
            ValueError: the number of groups, a group's size, a group's hyperparameters,
                a state's index, an array's shape or kind (complex, object...) does not
                fit this optimizer, `"step"` is not a finite number >= 0, a state lacks an
                array its group's step updates.
            TypeError: a state entry its group's step updates is not an array.
            Nothing is changed when it raises.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= state_dict.keys():
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and "
                             f"'param_groups' (from state_dict()), got {type(state_dict).__name__}")
        saved = state_dict["param_groups"]
        id_map = self._match_groups(saved)
        groups = []
        for gi, (group, sg) in enumerate(zip(self.param_groups, saved)):
            new = {k: copy.deepcopy(v) for k, v in sg.items() if k != "params"}
            for flag in IMPL_FLAGS:  # PyTorch's __setstate__ fills these in too
                if flag in self.defaults:
                    new.setdefault(flag, self.defaults[flag])
            missing = sorted(set(self.defaults) - set(new))
            if missing:
                raise ValueError(f"{name}.load_state_dict: saved group {gi} lacks {missing} "
                                 f"(a state dict of another optimizer?)")
            new["params"] = group["params"]
            if "param_names" in group and "param_names" not in new:
                new["param_names"] = group["param_names"]
            self._check_group(new)
            groups.append(new)
        group_of = {id(p): g for g in groups for p in g["params"]}
        state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k not in id_map:
                raise ValueError(f"{name}.load_state_dict: state for parameter {k!r}, which "
                                 f"no saved group lists")
            p = id_map[k]
            state[p] = _load_param_state(name, k, p, v)
            if state[p]:
                self._check_state(f"{name}.load_state_dict: parameter {{!r}}", k, p,
                                  self._state_keys(group_of[id(p)]), state[p])
        self.state, self.param_groups = state, groups

    def _match_groups(self, saved: Any) -> dict[Any, Tensor]:
        """Map saved parameter indices to this optimizer's parameters, checking the
        group count and sizes."""
        name = type(self).__name__
        if not isinstance(saved, (list, tuple)) or not all(
                isinstance(g, dict) and "params" in g for g in saved):
            raise ValueError(f"{name}.load_state_dict: 'param_groups' must be a list of "
                             f"dicts with 'params'")
        if len(saved) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: loaded state dict has "
                             f"{len(saved)} parameter groups, the optimizer "
                             f"{len(self.param_groups)}")
        for gi, (g, sg) in enumerate(zip(self.param_groups, saved)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"{name}.load_state_dict: loaded parameter group {gi} has "
                                 f"{len(sg['params'])} parameters, the optimizer's "
                                 f"{len(g['params'])}")
        return dict(zip(chain.from_iterable(g["params"] for g in saved),
                        chain.from_iterable(g["params"] for g in self.param_groups)))

    # --- pickling and printing -----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What pickling and deepcopy keep: `defaults`, `state` and `param_groups` (the
        parameters are pickled with them, as in PyTorch), not the scratch buffers."""
        return {"defaults": self.defaults, "state": self.state,
                "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self._opt_called = False
        self._made = {}

    def __repr__(self) -> str:
        """PyTorch's layout: the class, then each group's hyperparameters, sorted, a blank
        line between groups."""
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            text += "".join(f"    {k}: {group[k]}\n" for k in sorted(group)
                            if k not in ("params", "param_names"))
        return text + ")"


IMPL_FLAGS = ("foreach", "fused", "capturable", "differentiable")
"""PyTorch's implementation switches: accepted where torch.optim accepts them and kept in
the groups (state dicts and reprs show them as PyTorch's do). `foreach` and `fused` pick
one of PyTorch's kernels, which compute the same update: ignored here. `capturable`
(CUDA graphs) and `differentiable` (autograd through the step) are refused by the step,
as PyTorch's step refuses them for CPU parameters and for leaves that require grad."""


def _check_impl_flags(owner: str, defaults: dict[str, Any]) -> None:
    """PyTorch's constructor checks: RuntimeError for fused with differentiable or with
    foreach (same messages)."""
    if defaults.get("fused"):
        if defaults.get("differentiable"):
            raise RuntimeError(f"{owner}: `fused` does not support `differentiable`")
        if defaults.get("foreach"):
            raise RuntimeError(f"{owner}: `fused` and `foreach` cannot be `True` together.")


def _check_step_flags(owner: str, gi: int, group: dict[str, Any]) -> None:
    """Refuse, before any write, what PyTorch's step refuses for our parameters (CPU
    leaves that require grad): `capturable` without `fused` (AssertionError, as
    PyTorch's), `differentiable` (RuntimeError, as PyTorch's in-place update of such a
    leaf; PyTorch fails after updating the state, this fails before)."""
    if group.get("differentiable"):
        raise RuntimeError(f"{owner}.step: group {gi} has differentiable=True: a step that "
                           f"autograd can differentiate is not supported (PyTorch's fails "
                           f"too on leaves that require grad: 'a leaf Variable that requires "
                           f"grad is being used in an in-place operation')")
    if group.get("capturable") and not group.get("fused"):
        raise AssertionError(f"{owner}.step: group {gi} has capturable=True, which needs "
                             f"parameters on a CUDA graph-capturable device (PyTorch: 'If "
                             f"capturable=True, params and state_steps must be on supported "
                             f"devices'); parallel_autograd runs on the CPU")


def _check_step(where: str, state: dict[str, Any]) -> None:
    """Raise unless `state["step"]` is a real number, finite and >= 0."""
    if "step" not in state:
        raise ValueError(f"{where}: its state has no 'step' (it holds "
                         f"{sorted(map(str, state))}; an empty state starts afresh)")
    step = state["step"]
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, numbers.Real):
        raise TypeError(f"{where}: state 'step' must be a real number, got "
                        f"{type(step).__name__} {step!r}")
    if not (math.isfinite(step) and step >= 0):
        raise ValueError(f"{where}: state 'step' must be finite and >= 0, got {step!r}")


def _check_array(where: str, key: str, value: Any, arr: np.ndarray, state: dict[str, Any],
                 optional: bool) -> None:
    """Raise unless `value`, state `key`, is an array a step can update in place with
    `arr` (an optional one may be None)."""
    if value is None:
        if optional:
            return
        raise ValueError(f"{where}: its state lacks {key!r} (it holds "
                         f"{sorted(map(str, state))})")
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where}: state {key!r} must be an ndarray, got "
                        f"{type(value).__name__}")
    if value.shape != arr.shape or value.dtype != arr.dtype:
        raise ValueError(f"{where}: state {key!r} is a {value.dtype} array of shape "
                         f"{value.shape}, the parameter a {arr.dtype} one of shape "
                         f"{arr.shape} (was p.data replaced?)")
    if not value.flags.writeable:
        raise ValueError(f"{where}: state {key!r} is read-only")


def _copy_value(key: str, value: Any) -> Any:
    """A state entry as PyTorch's state_dict holds it: an array as a Tensor (a copy), the
    `"step"` count as a 0-d Tensor of PyTorch's scalar dtype (float32, or float64 when
    that is the default dtype: torch.optim's `_get_scalar_dtype`)."""
    if isinstance(value, np.ndarray):
        return Tensor._wrap(value.copy())
    if key == "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
        scalar = np.float64 if D.get_default_dtype() == D.float64 else np.float32
        return Tensor._wrap(np.array(value, dtype=scalar))
    return copy.deepcopy(value)


def _load_param_state(owner: str, key: Any, p: Tensor, saved: Any) -> dict[str, Any]:
    """A copy of one parameter's saved state: arrays (or Tensors) of the parameter's
    shape become C-contiguous arrays, of its dtype when it is floating point (PyTorch's
    `_process_value_according_to_param_policy`), `step` a float."""
    if not isinstance(saved, dict):
        raise ValueError(f"{owner}.load_state_dict: state {key!r} must be a dict, got "
                         f"{type(saved).__name__}")
    arr = p._data
    out = {}
    for k, v in saved.items():
        if isinstance(v, Tensor):
            v = v._data
        if k == "step":
            out[k] = load_step(owner, key, v)
        elif isinstance(v, np.ndarray):
            where = f"{owner}.load_state_dict: state {k!r} of parameter {key!r}"
            if v.shape != arr.shape:
                raise ValueError(f"{where} has shape {v.shape}, the parameter {arr.shape}")
            if v.dtype.kind not in "biuf":  # PyTorch drops an imaginary part, with a warning
                raise ValueError(f"{where} is a {v.dtype} array: only real numbers can be "
                                 f"cast to the parameter's {arr.dtype}")
            dtype = arr.dtype if arr.dtype.kind == "f" else v.dtype
            out[k] = np.array(v, dtype=dtype, order="C", copy=True)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_step(owner: str, key: Any, v: Any, entry: str = "step") -> float:
    """A saved `"step"` (or other number `entry`: a number, or a 0-d array as PyTorch
    saves it) as a float."""
    a = None if isinstance(v, (str, bytes)) else np.asarray(v)
    if a is None or a.shape != () or a.dtype.kind not in "iuf":
        raise ValueError(f"{owner}.load_state_dict: state {entry!r} of parameter {key!r} must "
                         f"be a number, got {type(v).__name__} {v!r}")
    step = float(a)
    if not (np.isfinite(step) and step >= 0):
        raise ValueError(f"{owner}.load_state_dict: state {entry!r} of parameter {key!r} must be "
                         f"finite and >= 0, got {step!r}")
    return step
