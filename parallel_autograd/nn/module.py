"""`Module`: the base class of layers and models (PyTorch's `torch.nn.Module`).

A module registers what is assigned to it: a `Parameter` becomes a parameter, a
`Module` a submodule, and `register_buffer` adds a buffer (a tensor that is part of
the state but not trained). Registration order is assignment order, and names are
dotted paths (`"encoder.0.weight"`), exactly as in PyTorch, so state dicts line up.

Thread safety: a Module has no lock. Calling it (forward) from several threads at
once is fine (forward only reads parameters and buffers; each call builds its own
graph). Mutating it - assigning attributes, `load_state_dict`, `to`, `train`/`eval`,
`zero_grad` - concurrently with forward or backward calls that use it is not safe.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np

from ..device import check_device
from ..device import device as device_type
from ..grad_mode import no_grad
from ..tensor import Tensor
from .parameter import Parameter

__all__ = ["Module", "IncompatibleKeys", "RemovableHandle"]


class IncompatibleKeys(NamedTuple):
    """What `Module.load_state_dict` returns: the model's keys absent from the state
    dict and the state dict's keys the model does not have (PyTorch's
    `_IncompatibleKeys`)."""

    missing_keys: list
    unexpected_keys: list

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (f"IncompatibleKeys(missing_keys={self.missing_keys}, "
                f"unexpected_keys={self.unexpected_keys})")


class RemovableHandle:
    """Returned by the hook registrations: `remove()` unregisters the hook."""

    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        """Unregister the hook (a no-op when already removed)."""
        self._hooks.pop(self._key, None)


_HOOK_IDS = itertools.count()


def _typename(value) -> str:
    return type(value).__module__ + "." + type(value).__qualname__


def _check_name(module: "Module", name, kind: str, table: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
    if "." in name:
        raise KeyError(f'{kind} name cannot contain ".", got {name!r}')
    if name == "":
        raise KeyError(f'{kind} name cannot be the empty string')
    if hasattr(module, name) and name not in module.__dict__[table]:
        raise KeyError(f"attribute '{name}' already exists")


def _add_indent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
    """Base class of all layers and models; subclass it and define `forward`.

    Assigning a `Parameter`, a `Module` or (once registered) a buffer to an attribute
    registers it; `__call__` runs the forward pre-hooks, `forward` and the forward
    hooks. Subclasses must call `super().__init__()` before assigning parameters or
    submodules.

    Example::

        class MLP(pa.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = pa.nn.Linear(4, 8)
                self.fc2 = pa.nn.Linear(8, 2)

            def forward(self, x):
                return self.fc2(pa.relu(self.fc1(x)))
    """

    training: bool

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()

    # ---- calling ------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """The computation; every subclass defines it. Call the module, not `forward`,
        so that hooks run."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  f'"forward" function')

    def __call__(self, *args, **kwargs):
        """Run the forward pre-hooks (`hook(module, args)`, may return new args), then
        `forward(*args, **kwargs)`, then the forward hooks (`hook(module, args, output)`,
        may return a new output); returns the output."""
        d = self.__dict__
        if not d["_forward_pre_hooks"] and not d["_forward_hooks"]:
            return self.forward(*args, **kwargs)
        for hook in list(d["_forward_pre_hooks"].values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        out = self.forward(*args, **kwargs)
        for hook in list(d["_forward_hooks"].values()):
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    def register_forward_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, args)` before each forward; a non-None return value
        replaces the positional arguments. Returns a handle with `.remove()`."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, args, output)` after each forward; a non-None return
        value replaces the output. Returns a handle with `.remove()`."""
        return self._add_hook(self._forward_hooks, hook)

    @staticmethod
    def _add_hook(hooks: dict, hook: Callable) -> RemovableHandle:
        key = next(_HOOK_IDS)  # never reused: a stale handle cannot remove a newer hook
        hooks[key] = hook
        return RemovableHandle(hooks, key)

    # ---- registration -------------------------------------------------------------
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None, a declared but absent parameter) under `name`.

        Raises AttributeError before `Module.__init__`, KeyError for a bad or taken
        name, TypeError if `param` is not a Parameter."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(self, name, "parameter", "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter "
                            f"'{name}' (pa.nn.Parameter or None required; a Parameter is "
                            f"always a leaf)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None,
                        persistent: bool = True) -> None:
        """Add a buffer (state that is not a parameter, e.g. running statistics) under
        `name`. Persistent buffers are part of `state_dict()`; None declares the buffer
        without a value (then it is left out of the state dict)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(self, name, "buffer", "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer "
                            f"'{name}' (pa.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a submodule (or None) under `name`; same as assigning the attribute."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        _check_name(self, name, "module", "_modules")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params, modules, buffers = d.get("_parameters"), d.get("_modules"), d.get("_buffers")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, d, buffers, modules, d["_non_persistent_buffers_set"])
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                f"(pa.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, d, params, buffers, d["_non_persistent_buffers_set"])
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module "
                                f"'{name}' (pa.nn.Module or None expected)")
            modules[name] = value
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                f"(pa.Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name: str, *tables) -> None:
        for t in tables:
            if isinstance(t, dict):
                t.pop(name, None)
            else:
                t.discard(name)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails; reads __dict__ directly so that a
        # half-built instance (during unpickling) raises AttributeError, not recursion.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        if name in d.get("_parameters", ()):
            del d["_parameters"][name]
        elif name in d.get("_buffers", ()):
            del d["_buffers"][name]
            d["_non_persistent_buffers_set"].discard(name)
        elif name in d.get("_modules", ()):
            del d["_modules"][name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list:
        keys = list(super().__dir__()) + list(self._parameters) + list(self._modules) \
            + list(self._buffers)
        return sorted(k for k in set(keys) if not k[:1].isdigit())

    def __setstate__(self, state: dict) -> None:
        """Unpickling: restores the attributes (fills hook tables missing from older
        pickles)."""
        self.__dict__.update(state)
        for table in ("_forward_pre_hooks", "_forward_hooks"):
            self.__dict__.setdefault(table, OrderedDict())

    # ---- iteration ----------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """(name, module) for this module (name `prefix`) and every descendant, depth
        first in registration order; a module reachable twice is yielded once unless
        `remove_duplicate=False`."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        """This module and every descendant, each once."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        """(name, module) for the direct submodules, each once."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        """The direct submodules, each once."""
        for _, m in self.named_children():
            yield m

    def _named_members(self, table: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for k, v in mod.__dict__[table].items():
                if v is None or id(v) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) in registration order, submodules depth first; a
        parameter shared by several modules comes once, under its first name (unless
        `remove_duplicate=False`). `recurse=False`: this module's own only."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters of `named_parameters()`, each once (what an optimizer takes)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) like `named_parameters`, persistent or not."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers of `named_buffers()`, each once."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path `target` ("" is this module); AttributeError
        naming the missing part otherwise."""
        mod = self
        for part in target.split(".") if target else []:
            sub = mod._modules.get(part)
            if not isinstance(sub, Module):
                raise AttributeError(f"{type(mod).__name__} has no submodule `{part}` "
                                     f"(looking up {target!r})")
            mod = sub
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path `target` (e.g. "0.weight")."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        p = mod._parameters.get(name)
        if not isinstance(p, Parameter):
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return p

    # ---- modes and gradients ------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set `training` to `mode` on this module and every descendant (Dropout
        drops only in training mode). Returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        """`train(False)`: evaluation mode for this module and every descendant."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set `requires_grad` on every parameter (freeze with False). Returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter: `.grad = None` (default), or, with
        `set_to_none=False`, fill the existing `.grad` Tensors with zeros in place
        (code holding them sees the zeros)."""
        for p in self.parameters():
            if p._grad is None:
                continue
            if set_to_none:
                p._grad = None
            else:
                p._zero_grad_in_place()

    def apply(self, fn: Callable[["Module"], Any]) -> "Module":
        """Call `fn(module)` on every submodule (children first, recursively) and then
        on this module, e.g. for custom initialisation. Returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- state dict ---------------------------------------------------------------
    def _local_state(self) -> "OrderedDict[str, Tensor]":
        """This module's own parameters and persistent buffers that are not None."""
        out = OrderedDict((k, v) for k, v in self._parameters.items() if v is not None)
        for k, v in self._buffers.items():
            if v is not None and k not in self._non_persistent_buffers_set:
                out[k] = v
        return out

    def state_dict(self, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """An OrderedDict from dotted name to the values of every parameter and
        persistent buffer, in `named_parameters` order per module (a shared
        parameter appears under each of its names, as in PyTorch).

        The values are detached tensors sharing memory (and the version counter) with
        the parameters, like PyTorch: they change when the model trains; copy them
        (`{k: v.numpy().copy() ...}` or `pa.save`) to keep a snapshot. `keep_vars=True`
        gives the Parameters and buffers themselves. Returns `destination` (a new
        OrderedDict if None)."""
        if destination is None:
            destination = OrderedDict()
        for name, mod in self.named_modules(prefix=prefix, remove_duplicate=False):
            dot = name + "." if name else ""
            for k, v in mod._local_state().items():
                destination[dot + k] = v if keep_vars else v.detach()
        return destination

    def load_state_dict(self, state_dict: Mapping[str, Any],
                        strict: bool = True) -> IncompatibleKeys:
        """Copy values from `state_dict` (name -> Tensor or ndarray, as `state_dict()`
        or `pa.load` give) into the parameters and persistent buffers, in place.

        All or nothing: every key, shape and dtype is checked before anything is
        written. Raises RuntimeError listing every problem, changing nothing, when a
        value has the wrong shape, is not a Tensor/ndarray, or has the wrong kind of
        dtype (e.g. integer or complex values for a floating parameter; float32 into
        float64 is cast, as PyTorch's `copy_` does), and, if `strict`, when keys are
        missing or unexpected. Values are written into the existing arrays (under
        `no_grad`, bumping version counters), so optimizers holding the parameters
        stay valid. Returns `IncompatibleKeys(missing_keys, unexpected_keys)`."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors, writes = [], []
        if strict and missing:
            errors.append("Missing key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in missing) + ".")
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in unexpected) + ".")
        for key, target in own.items():
            if key in state_dict:
                src = _checked_source(key, state_dict[key], target, errors)
                if src is not None:
                    writes.append((target, src))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__} "
                               f"(nothing was changed):\n\t" + "\n\t".join(errors))
        with no_grad():
            for target, src in writes:
                target.copy_(src)
        return IncompatibleKeys(missing, unexpected)

    # ---- dtype --------------------------------------------------------------------
    def to(self, *args, **kwargs) -> "Module":
        """PyTorch's `Module.to`: `to(device)`, `to(dtype)`, `to(device, dtype)`,
        `to(tensor)` (its dtype), or keywords `device=`, `dtype=`, `non_blocking=`.

        Casts every floating parameter, its `.grad` and every floating buffer to the dtype
        (in place: the Parameter objects stay the same, their arrays are replaced). The
        device must be the CPU (a string, `pa.device` or `torch.device`); another raises
        `DeviceUnavailableError`, as PyTorch without CUDA. Returns self."""
        device, dtype = _to_args(args, kwargs)
        check_device(device, "Module.to")
        if dtype is None:
            return self
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, "
                            f"but got desired dtype={dtype}")
        for m in self.modules():
            for p in m._parameters.values():
                if p is not None and p._data.dtype.kind == "f":
                    p._data = p._data.astype(dtype, copy=False)
                    if p._grad is not None:
                        p._grad = Tensor._wrap(p._grad._data.astype(dtype, copy=False))
            for k, b in m._buffers.items():
                if b is not None and b._data.dtype.kind == "f" and b._data.dtype != dtype:
                    m._buffers[k] = Tensor(b._data.astype(dtype), requires_grad=b.requires_grad)
        return self

    def cpu(self) -> "Module":
        """Self (everything already is on the CPU)."""
        return self

    def cuda(self, device=None) -> "Module":
        """PyTorch's `Module.cuda`: there is no CUDA here: `DeviceUnavailableError`."""
        check_device("cuda", "Module.cuda")
        return self

    def half(self) -> "Module":
        """`to(float16)`."""
        return self.to(np.float16)

    def double(self) -> "Module":
        """`to(np.float64)`."""
        return self.to(np.float64)

    def float(self) -> "Module":
        """`to(np.float32)` (PyTorch's `float` is 32-bit)."""
        return self.to(np.float32)

    # ---- printing -----------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr (its settings);
        layers override it. Empty by default."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        """Nested like PyTorch's: `Name(extra)` or, with submodules, one line per
        child `(name): repr` indented by two spaces."""
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(" + k + "): " + _add_indent(repr(m), 2)
                       for k, m in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if len(extra_lines) == 1 and not child_lines:
            body = extra_lines[0]
        elif lines:
            body = "\n  " + "\n  ".join(lines) + "\n"
        return self._get_name() + "(" + body + ")"


def _checked_source(key: str, value, target: Tensor, errors: list):
    """The ndarray to copy into `target`, or None after appending to `errors`."""
    if isinstance(value, Tensor):
        src = value._data
    elif isinstance(value, (np.ndarray, np.generic)):
        src = np.asarray(value)
    else:
        errors.append(f'While copying the parameter named "{key}", expected a pa.Tensor or '
                      f'numpy.ndarray from the checkpoint but received {type(value)}.')
        return None
    dst = target._data
    if not dst.flags.writeable:
        errors.append(f"cannot load {key}: the array in the current model is read-only.")
        return None
    if dst.ndim == 0 and src.shape == (1,):
        src = src.reshape(())
    if src.shape != dst.shape:
        errors.append(f"size mismatch for {key}: copying a param with shape {src.shape} "
                      f"from checkpoint, the shape in current model is {dst.shape}.")
        return None
    same_kind = src.dtype.kind == dst.dtype.kind or {src.dtype.kind, dst.dtype.kind} <= set("iu")
    if not same_kind:
        errors.append(f"dtype mismatch for {key}: copying a param with dtype {src.dtype} "
                      f"from checkpoint, the dtype in current model is {dst.dtype}.")
        return None
    return src


def _to_args(args: tuple, kwargs: dict) -> tuple:
    """(device, dtype) from `Module.to`'s forms (torch's `_parse_to`)."""
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "memory_format", "copy"}
    if unknown:
        raise TypeError(f"to() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    if len(args) > 3:
        raise TypeError(f"to() takes at most 3 positional arguments, got {len(args)}")
    for a in args:
        if isinstance(a, bool):                   # non_blocking given positionally
            continue
        if isinstance(a, Tensor):
            dtype = a._data.dtype
        elif isinstance(a, (str, device_type)) or type(a).__name__ == "device":
            try:
                device = device_type(a)
            except RuntimeError:                  # a dtype name such as "float32"
                dtype = a
        elif a is not None:
            dtype = a
    return device, dtype
