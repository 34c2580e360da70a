"""Tensor: an ndarray plus what autograd needs (requires_grad, grad, grad_fn).

This module defines the class only; its operators, op methods and `backward` are
attached by `methods.py` (imported last by the package), so it imports no op
module and no engine.

Thread safety: reading a tensor is safe from any thread. `.grad` is
updated by the engines under the tensor's lock (`locks.grad_lock`), so concurrent backward calls
that share leaves are safe; assigning `.grad` yourself while a backward runs is not.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import dtypes as D
from . import locks
from .device import CPU, device

FLOAT_KINDS = "f"  # complex is rejected: no rule conjugates


def _python_numbers_only(data) -> bool:
    """Whether `data` is a Python number or nested lists/tuples of them (no array,
    numpy scalar or tensor, whose dtype numpy's inference keeps)."""
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif not isinstance(x, (bool, int, float, complex)) or isinstance(x, np.generic):
            return False
    return True


def _default_of(kind_dtype: np.dtype) -> np.dtype:
    """The default dtype (complex: its complex twin) for what numpy inferred from Python
    numbers (bool, int64, float64, complex128)."""
    d = D.to_numpy(D.get_default_dtype())
    if kind_dtype.kind == "c":
        return np.dtype(np.complex64 if d == np.float32 else np.complex128)
    return d


class Tensor:
    """A numpy array that records the ops applied to it when it requires grad.
    `Tensor(data)`: a copy of `data`; Python numbers (floats, ints, bools: `Tensor([1])`)
    take the default dtype (`pa.get_default_dtype()`), as `torch.Tensor`'s; an ndarray
    keeps its dtype (torch.Tensor would convert it: use `pa.tensor` or `.to()` to say
    which you mean). `Tensor(3)`, `Tensor(2, 3)`, `Tensor(pa.Size([2, 3]))`, `Tensor()`:
    sizes, as torch.Tensor's, giving zeros (PyTorch's are uninitialised) of the default
    dtype; a lone Python float or bool is a TypeError (PyTorch's "data must be a
    sequence"). `pa.tensor(3)` is the 0-d tensor."""

    __slots__ = ("_data", "_grad", "_requires_grad", "grad_fn", "_hooks", "_accumulator", "_vc",
                 "_post_hooks", "_ready_hooks",
                 "_base",  # a view made with grad recorded: the tensor it views (unset else)
                 "__weakref__")
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operator

    def __init__(self, *args, requires_grad: bool = False, dtype=None):
        sizes = _sizes(args)
        if sizes is not None:
            arr = np.zeros(sizes, dtype if dtype is not None else _default_of(np.dtype("f")))
            if requires_grad and arr.dtype.kind not in FLOAT_KINDS:
                raise GradDtypeError(_int_grad_message(arr.dtype))
            self._init(arr, None)
            self.requires_grad = requires_grad
            return
        if len(args) != 1:
            raise TypeError(f"Tensor(): expected sizes (ints) or one sequence of data, got "
                            f"{len(args)} arguments of types "
                            f"{[type(a).__name__ for a in args]}")
        if isinstance(args[0], (bool, float, complex, np.bool_, np.floating,
                                np.complexfloating)):
            raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__}); "
                            f"pa.tensor({args[0]!r}) makes a 0-d tensor")
        self._from_data(args[0], requires_grad, dtype)

    def _from_data(self, data, requires_grad: bool, dtype) -> None:
        """`Tensor(data)` (and `pa.tensor`'s): a copy of `data`, Python numbers in the
        default dtype."""
        if isinstance(data, Tensor):
            data = data._data
        arr = np.array(data, dtype=dtype, copy=True)
        if dtype is None and arr.dtype.kind in "biufc" and _python_numbers_only(data):
            # Python numbers (bools and ints too): the default dtype, as torch.Tensor's
            arr = arr.astype(_default_of(arr.dtype))
        if arr.dtype.kind not in FLOAT_KINDS and requires_grad:
            raise GradDtypeError(_int_grad_message(arr.dtype))
        self._init(arr, None)
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, arr: np.ndarray, grad_fn=None, vc=None) -> "Tensor":
        """A tensor around `arr` (no copy); `vc`: the version counter to share
        (`parallel_autograd.version`), default a fresh one."""
        t = cls.__new__(cls)  # _init inlined: this is on every op's path
        t._data = arr
        t._grad = None
        t.grad_fn = grad_fn
        t._hooks = []
        t._accumulator = None
        t._vc = [0] if vc is None else vc
        t._post_hooks = None
        t._ready_hooks = None
        t._requires_grad = grad_fn is not None
        return t

    def _init(self, arr, grad_fn):
        self._vc = [0]
        self._post_hooks = None
        self._ready_hooks = None
        self._data = arr
        self._grad = None
        self.grad_fn = grad_fn
        self._hooks = []
        self._accumulator = None
        self._requires_grad = False

    # the ndarray lives in the `_data` slot: the library reads the slot, never `.data`
    @property
    def data(self) -> "Tensor":
        """PyTorch's `.data`: a new Tensor sharing this tensor's memory, with no history
        (requires_grad False, grad_fn None) and a version counter of its own, always a
        plain Tensor (a Parameter's too). Writes through it (`p.data.add_(g, alpha=-lr)`,
        `p.data.copy_(w)`, `p.data[:] = 0`) change this tensor's values without being
        recorded, without bumping this tensor's version and so without the "modified by an
        inplace operation" error at backward: a backward then uses the new values, as in
        PyTorch. For the ndarray itself use `.numpy()` (or `.detach().numpy()`).

        `t.data = other` (a Tensor, else TypeError as PyTorch) makes `t` use `other`'s
        memory (shape and dtype may change; `t` keeps its history, grad and version). On a
        tensor that requires grad, `other` must be floating point (RuntimeError).
        Thread safety: like any write, not synchronised with readers of `t`."""
        return Tensor._wrap(self._data)

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(value).__name__}")
        arr = value._data
        if self._requires_grad and arr.dtype.kind not in FLOAT_KINDS:
            raise RuntimeError("data set to a tensor that requires gradients must be "
                               "floating point or complex dtype")
        self._data = arr

    @data.deleter
    def data(self) -> None:
        raise RuntimeError("Deleting tensor data is not allowed. Delete tensor instead!")

    # --- autograd attributes -------------------------------------------------
    @property
    def grad(self) -> "Tensor | None":
        """The accumulated gradient: None until a backward reaches this tensor, then a
        Tensor of its shape and dtype (PyTorch's `.grad`). Backward passes add into
        its array in place, so `p.grad.zero_()` or `p.grad.data.mul_(2)` change what
        the next backward adds to and what an optimizer reads."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self._grad = _as_grad(self, value)

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool):
        value = bool(value)
        if self.grad_fn is not None:
            if not value:
                raise RuntimeError("requires_grad can only be changed on leaf tensors; "
                                   "use .detach() to get a tensor without history")
            return
        if value and self._data.dtype.kind not in FLOAT_KINDS:
            raise GradDtypeError(_int_grad_message(self._data.dtype))
        self._requires_grad = value

    def requires_grad_(self, value: bool = True) -> "Tensor":
        self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def retain_grad(self) -> None:
        """Keep `.grad` for this non-leaf tensor after backward (a no-op on leaves)."""
        if self.grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on a tensor that does not require grad")
            return
        self.grad_fn.retained = weakref.ref(self)

    def register_hook(self, fn):
        """Call `fn(grad)` when this tensor's gradient is complete; a non-None
        return value replaces the gradient (same shape required). Returns a handle
        with `.remove()`. Hooks run on whichever thread completes the gradient."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if self.grad_fn is not None:
            with locks.once:
                if self.grad_fn.pre_hooks is None:
                    self.grad_fn.pre_hooks = []
            hooks = self.grad_fn.pre_hooks
        else:
            hooks = self._hooks
        hooks.append(fn)
        return _HookHandle(hooks, fn)

    def register_post_accumulate_grad_hook(self, fn) -> "_HookHandle":
        """Call `fn(tensor)` once this leaf's `.grad` is final for a backward call
        (PyTorch's hook of the same name; what an optimizer step in backward or a
        gradient all-reduce builds on). Returns a handle with `.remove()`.

        When: after the call's write-back, which is all or nothing, so every `.grad`
        of the call is already written; never for a call that failed. Where: on the
        thread that called backward, hooks of different leaves in backward order (the
        leaf used last in the forward pass first), each leaf's in registration order,
        in both engines. If a hook raises, the gradients stay written, the remaining
        hooks do not run and the error propagates from backward."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on "
                               "non-leaf tensors")
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        with locks.once:
            if self._post_hooks is None:
                self._post_hooks = []
        self._post_hooks.append(fn)
        return _HookHandle(self._post_hooks, fn)

    def register_grad_ready_hook(self, fn) -> "_HookHandle":
        """Call `fn(tensor, grad)` during backward, as soon as this leaf's gradient for the
        call is final (every contribution summed, tensor hooks applied), before the call's
        write-back: what a gradient all-reduce overlapped with the rest of the backward
        builds on (`nn.parallel.DistributedDataParallel`). A parallel_autograd extension:
        PyTorch's DDP uses a C++ post hook on the leaf's AccumulateGrad node instead.

        `grad` is this call's gradient alone (not yet added to `.grad`); do not modify it.
        If `fn` returns an ndarray of the tensor's shape and dtype, the write-back *sets* `.grad` to
        that array instead of accumulating `grad` (the hook took over the accumulation;
        it may fill the array later, from a `queue_callback` that runs before the
        write-back). At most one hook per call may do so. Called for `backward` calls only
        (not `grad()`), in both engines, on whichever thread completed the gradient,
        concurrently with other leaves' hooks: `fn` must be thread-safe. If it raises, the
        call fails and no `.grad` changes. Returns a handle with `.remove()`."""
        if self.grad_fn is not None:
            raise RuntimeError("grad-ready hooks cannot be registered on non-leaf tensors")
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if not callable(fn):
            raise TypeError(f"register_grad_ready_hook: expected a callable, got "
                            f"{type(fn).__name__}")
        with locks.once:
            if self._ready_hooks is None:
                self._ready_hooks = []
        self._ready_hooks.append(fn)
        return _HookHandle(self._ready_hooks, fn)

    def detach(self) -> "Tensor":
        """The same values (shared memory, shared version counter), no history."""
        return Tensor._wrap(self._data, None, self._vc)

    def zero_grad(self) -> None:
        self._grad = None

    def _zero_grad_in_place(self) -> None:
        """`.grad` filled with zeros in place (`zero_grad(set_to_none=False)`); one that
        carries a graph (create_graph) or is read-only is replaced by new zeros instead,
        as PyTorch detaches it first."""
        g = self._grad
        if g is None:
            return
        arr = g._data
        if g.grad_fn is None and isinstance(arr, np.ndarray) and arr.flags.writeable:
            arr.fill(0)
        else:
            self._grad = Tensor._wrap(np.zeros(arr.shape, arr.dtype))

    # --- array-like attributes -----------------------------------------------
    # a plain tuple (equal to `size()`): as a Size, every error message that prints a
    # shape would read "Size([2, 3])" instead of numpy's "(2, 3)"
    shape = property(lambda self: self._data.shape)
    ndim = property(lambda self: self._data.ndim)
    dtype = property(lambda self: self._data.dtype)

    def size(self, dim: int | None = None):
        """PyTorch's `size`: the dimensions as a `Size`, or with `dim` the length of
        that dimension (negative counts from the end; IndexError out of range). Not
        numpy's element count: that is `numel()`."""
        shape = self._data.shape
        if dim is None:
            return Size(shape)
        return shape[_dim_index(dim, len(shape))]


    # --- device (CPU only: parallel_autograd.device) ----------------------------
    @property
    def device(self) -> device:
        """Where the tensor lives: always `device(type='cpu')`."""
        return CPU

    is_cuda = property(lambda self: False, doc="False: there is no CUDA here.")
    is_cpu = property(lambda self: True, doc="True: every tensor is on the CPU.")
    is_meta = property(lambda self: False, doc="False: there are no meta tensors.")

    def __len__(self):
        return len(self._data)

    def item(self):
        return self._data.item()

    def numpy(self) -> np.ndarray:
        return self._data

    def __array__(self, dtype=None, copy=None):
        """numpy's protocol: the data itself when numpy may share it (`np.asarray(t)`),
        a copy when `copy=True` (`np.array(t)`, `np.array(t, copy=True)`) or the dtype
        differs; `copy=False` with a dtype change raises, as numpy does."""
        data = self._data
        if dtype is not None and np.dtype(dtype) != data.dtype:
            if copy is False:
                raise ValueError(f"Unable to avoid copy while creating an array of dtype "
                                 f"{np.dtype(dtype)} from a Tensor of dtype {data.dtype}")
            return data.astype(dtype)
        return data.copy() if copy else data

    def __repr__(self):
        """`tensor([1., 2.], requires_grad=True)`, like PyTorch: the values as numpy
        prints them (summarised past 1,000 elements), then the dtype unless PyTorch
        leaves it out (the default dtype, its complex twin, int64, bool), then `grad_fn`
        or `requires_grad`."""
        name = "tensor" if type(self) is Tensor else type(self).__name__
        body = np.array2string(self._data, separator=", ", prefix=name + "(",
                               threshold=1000, edgeitems=3)
        extra = []
        dt = self._data.dtype
        if dt.kind in "fc":
            implied = dt == _default_of(dt)
        else:
            implied = dt in (np.int64, np.bool_)
        if not implied:
            extra.append(f"dtype={dt}")
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{self.grad_fn.name}>")
        elif self._requires_grad:
            extra.append("requires_grad=True")
        return f"{name}({body}{''.join(', ' + e for e in extra)})"

    # --- pickling and copying --------------------------------------------------
    def __getstate__(self) -> dict:
        """What pickling keeps: the values, `requires_grad` and `.grad` (no graph,
        no hooks: a non-leaf is restored as a leaf, as `torch.save` does). Subclasses'
        own attributes (a `__dict__`) are kept too."""
        grad = self._grad
        state = {"data": self._data, "requires_grad": self._requires_grad,
                 "grad": None if grad is None else grad._data}
        extra = getattr(self, "__dict__", None)
        if extra:
            state["dict"] = dict(extra)
        return state

    def __setstate__(self, state: dict) -> None:
        self._init(state["data"], None)
        self._requires_grad = state["requires_grad"]
        grad = state["grad"]  # an array (a subclass kept, as before), or a Tensor
        if grad is not None:
            grad = Tensor._wrap(grad._data if isinstance(grad, Tensor) else
                                grad if isinstance(grad, np.ndarray) else np.asarray(grad))
        self._grad = grad
        if "dict" in state:
            self.__dict__.update(state["dict"])

    def __deepcopy__(self, memo: dict) -> "Tensor":
        """A leaf copy (values and `.grad` copied). Like PyTorch, only leaves can be
        deep-copied: a tensor with a `grad_fn` raises RuntimeError."""
        if self.grad_fn is not None:
            raise RuntimeError("Only tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol; call .detach() first")
        import copy
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new

    def __bool__(self):
        return bool(self._data)

    def _scalar(self):
        """The one element as a numpy scalar (PyTorch's ValueError for any other size)."""
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self._data.reshape(())[()]

    def __float__(self) -> float:
        """`float(t)`: a one-element tensor's value (of any shape), as PyTorch's."""
        return float(self._scalar())

    def __int__(self) -> int:
        """`int(t)`: a one-element tensor's value truncated toward zero, as PyTorch's."""
        return int(self._scalar())

    def __complex__(self) -> complex:
        """`complex(t)`: a one-element tensor's value, as PyTorch's."""
        return complex(self._scalar())

    def __index__(self) -> int:
        """`operator.index(t)`, so that a one-element integer (or bool) tensor works as
        a slice bound, a list index or `range()`'s argument (`data[i:i + n] for i in ix`,
        ix from `randint`), as PyTorch's; TypeError for any other tensor."""
        if self._data.dtype.kind not in "biu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to "
                            "an index")
        return int(self._scalar())

    def __format__(self, format_spec: str) -> str:
        """As PyTorch's: a 0-d Tensor formats its value (`f"{loss:.4f}"`); anything else
        (a tensor with dimensions, or a subclass such as Parameter) only with an empty
        spec, as its str; a spec then raises TypeError."""
        if self._data.ndim == 0 and type(self) is Tensor:
            return self._data.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __hash__(self):
        return id(self)


class Size(tuple):
    """The dimensions of a tensor (`torch.Size`): a tuple of ints, equal to the plain
    tuple of the same ints; slicing and `+` give a Size; `numel()` is their product."""

    __slots__ = ()

    def __new__(cls, dims=()):
        return tuple.__new__(cls, dims)

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return Size(r) if isinstance(item, slice) else r

    def __add__(self, other):
        return Size(tuple.__add__(self, tuple(other)))

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self))

    def numel(self) -> int:
        """The number of elements a tensor of these dimensions holds."""
        n = 1
        for d in self:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"Size({list(self)})"

    def __reduce__(self):
        return (Size, (tuple(self),))


def _dim_index(dim, ndim: int) -> int:
    """`dim` as an index into a shape of `ndim` dimensions, checked as PyTorch does."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"size(): argument 'dim' (position 1) must be int, not "
                        f"{type(dim).__name__}")
    if ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-ndim}, {ndim - 1}], but got {dim})")
    return int(dim)


def _as_grad(t: Tensor, value):
    """What `t.grad = value` stores: None, or a Tensor of `t`'s shape and dtype (an
    ndarray is wrapped without a copy: backward then accumulates into it). A
    mismatched shape or dtype raises RuntimeError, anything else TypeError, as PyTorch."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = Tensor._wrap(value)
    elif not isinstance(value, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of "
                        f"type {type(value).__name__}")
    arr, own = value._data, t._data
    if arr.shape != own.shape:
        raise RuntimeError(f"attempting to assign a gradient of size '{list(arr.shape)}' "
                           f"to a tensor of size '{list(own.shape)}'. Please ensure that "
                           f"the gradient and the tensor are the same size")
    if arr.dtype != own.dtype:
        raise RuntimeError(f"attempting to assign a gradient with dtype '{arr.dtype}' to "
                           f"a tensor with dtype '{own.dtype}': the gradient must have "
                           f"the tensor's dtype")
    return value


class _HookHandle:
    def __init__(self, hooks, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self):
        try:
            self._hooks.remove(self._fn)
        except ValueError:
            pass


class GradDtypeError(RuntimeError, TypeError):
    """A non-floating tensor asked to require grad: PyTorch's RuntimeError, and also a
    TypeError (what this library raised before; code catching either still works)."""


def _int_grad_message(dtype) -> str:
    if np.dtype(dtype).kind == "c":
        return (f"complex tensors cannot require gradients (got dtype {dtype}): the rules "
                f"are written for real inputs and would give wrong gradients")
    return (f"only floating point tensors can require gradients, got dtype {dtype}; "
            f"convert with dtype=np.float64 or np.float32")


def numel(input: Tensor) -> int:
    """The number of elements of `input` (`torch.numel`)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"numel(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return input._data.size


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """Make a leaf tensor from array-like data (always copies); a number gives a 0-d
    tensor (where `Tensor(3)` is three zeros, as in PyTorch)."""
    t = Tensor.__new__(Tensor)
    t._from_data(data, requires_grad, dtype)
    return t


def _sizes(args: tuple):
    """`args` as the sizes of `Tensor(*sizes)` (ints, or one `Size`; none: `(0,)`), or
    None when they are data. Negative sizes: RuntimeError, as PyTorch's."""
    if not args:
        return (0,)
    if len(args) == 1 and isinstance(args[0], Size):
        args = tuple(args[0])
    if not all(isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))
               for a in args):
        return None
    sizes = tuple(int(a) for a in args)
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{min(sizes)}: {list(sizes)}")
    return sizes


