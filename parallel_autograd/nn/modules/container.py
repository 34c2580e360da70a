"""Containers: `Sequential`, `ModuleList`, `ModuleDict`, `ParameterList`, `ParameterDict`
(PyTorch's semantics: entries are named "0", "1", ... or by their keys, which is what
the state-dict names use)."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Iterable, Iterator, Mapping

import numpy as np

from ...tensor import Tensor
from ..module import Module, _add_indent
from ..parameter import Parameter


def _index(idx, n: int, kind: str) -> int:
    i = operator.index(idx)
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of range for {kind} of length {n}")
    return i % n


class Sequential(Module):
    """Modules applied in order: `Sequential(a, b, c)(x) == c(b(a(x)))`.

    Built from modules (named "0", "1", ...) or from one OrderedDict name -> module.
    Supports indexing (an int gives the module, a slice a new Sequential sharing the
    modules), `len`, iteration, `append`, `extend`, `insert`, `pop` and `del`."""

    def __init__(self, *args: Module) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, idx) -> Module:
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self), "Sequential")]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self), "Sequential")]
        self.add_module(key, module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        for key in (keys[idx] if isinstance(idx, slice)
                    else [keys[_index(idx, len(keys), "Sequential")]]):
            del self._modules[key]
        # renumber, as PyTorch does, so the names stay "0", "1", ...
        self.__dict__["_modules"] = OrderedDict(
            (str(i), m) for i, m in enumerate(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        """Add `module` at the end (named by its position). Returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        """Append each of `modules`. Returns self."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        """Insert `module` before position `index`, renumbering. Returns self."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        mods = list(self._modules.values())
        n = len(mods)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        mods.insert(index + n if index < 0 else index, module)
        self.__dict__["_modules"] = OrderedDict((str(i), m) for i, m in enumerate(mods))
        return self

    def pop(self, index: int = -1) -> Module:
        """Remove and return the module at `index`."""
        m = self[index]
        del self[index]
        return m

    def forward(self, input):
        """Each module applied to the previous one's output."""
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of submodules (named "0", "1", ...), registered so that their parameters
    belong to the parent; it has no forward of its own. Supports indexing (slices give
    a ModuleList), `len`, iteration, `append`, `extend`, `insert`, `pop`, `del`, `+=`."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx) -> None:
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            del mods[idx]
        else:
            del mods[_index(idx, len(mods), "ModuleList")]
        self.__dict__["_modules"] = OrderedDict((str(i), m) for i, m in enumerate(mods))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return type(self)(list(self) + list(other))

    def append(self, module: Module) -> "ModuleList":
        """Add `module` at the end. Returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Append each of `modules`. Returns self."""
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError("ModuleList.extend should be called with an iterable, but got "
                            + type(modules).__name__)
        for m in list(modules):
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert `module` before position `index`, renumbering."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self.__dict__["_modules"] = OrderedDict()
        for m in mods:
            self.append(m)

    def pop(self, index: int = -1) -> Module:
        """Remove and return the module at `index`."""
        m = self[index]
        del self[index]
        return m

    def __repr__(self) -> str:
        """PyTorch's: runs of identical children are compressed to `(0-2): 3 x …`."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks = []  # [start, end, repr]
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = [_add_indent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2)
                 for a, b, r in blocks]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of submodules (insertion order), registered under their keys;
    no forward of its own. Supports `d[key]`, assignment, `del`, `in`, `len`,
    iteration over keys, `keys`, `values`, `items`, `update`, `pop`, `clear`."""

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def items(self):
        """(key, module) pairs, in insertion order."""
        return self._modules.items()

    def update(self, modules: Mapping[str, Module] | Iterable) -> None:
        """Add or replace entries from a mapping or an iterable of (key, module) pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for j, pair in enumerate(pairs):
            if isinstance(pair, (str, bytes)) or len(pair) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} should be a "
                                 f"(key, module) pair")
            self[pair[0]] = pair[1]

    def pop(self, key: str) -> Module:
        """Remove and return the module under `key`."""
        m = self[key]
        del self[key]
        return m

    def clear(self) -> None:
        """Remove every entry."""
        self._modules.clear()


def _as_parameter(value) -> Parameter:
    """A Parameter as is; another Tensor or an ndarray wrapped (sharing memory), as
    PyTorch's ParameterList/ParameterDict do."""
    if isinstance(value, Parameter):
        return value
    if isinstance(value, (Tensor, np.ndarray)):
        return Parameter(value)
    raise TypeError(f"expected a pa.nn.Parameter, a pa.Tensor or an ndarray, "
                    f"got {type(value).__name__}")


def _describe(p: Parameter) -> str:
    size = "x".join(str(s) for s in p.shape)
    return f"Parameter containing: [{p.dtype} of size {size}]"


class ParameterList(Module):
    """A list of parameters registered under "0", "1", ... (PyTorch's
    `nn.ParameterList`); Tensors and ndarrays are wrapped in Parameters (sharing
    memory). Supports indexing (slices give a ParameterList), assignment, `len`,
    iteration, `append`, `extend`, `+=`."""

    def __init__(self, values: Iterable | None = None) -> None:
        super().__init__()
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self)[idx])
        return self._parameters[str(_index(idx, len(self), "ParameterList"))]

    def __setitem__(self, idx: int, value) -> None:
        setattr(self, str(_index(idx, len(self), "ParameterList")), _as_parameter(value))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def __iadd__(self, values: Iterable) -> "ParameterList":
        return self.extend(values)

    def append(self, value) -> "ParameterList":
        """Add `value` (wrapped in a Parameter if needed) at the end. Returns self."""
        setattr(self, str(len(self)), _as_parameter(value))
        return self

    def extend(self, values: Iterable) -> "ParameterList":
        """Append each of `values`. Returns self."""
        if isinstance(values, (Tensor, np.ndarray)):
            raise TypeError("ParameterList.extend should be called with an iterable of "
                            "parameters, not a single tensor")
        for v in list(values):
            self.append(v)
        return self

    def extra_repr(self) -> str:
        """One line per parameter: `(i): Parameter containing: [dtype of size AxB]`."""
        return "\n".join(f"  ({k}): {_describe(p)}" for k, p in enumerate(self))


class ParameterDict(Module):
    """An ordered dict of parameters registered under their keys (PyTorch's
    `nn.ParameterDict`; a plain dict given to it is taken in sorted key order, as
    PyTorch does); Tensors and ndarrays are wrapped in Parameters. Supports
    `d[key]`, assignment, `del`, `in`, `len`, iteration over keys, `keys`, `values`,
    `items`, `update`, `pop`."""

    def __init__(self, parameters: Mapping | Iterable | None = None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __contains__(self, key: str) -> bool:
        return key in self._parameters

    def keys(self):
        """The keys, in insertion order."""
        return self._parameters.keys()

    def values(self):
        """The parameters, in insertion order."""
        return self._parameters.values()

    def items(self):
        """(key, parameter) pairs, in insertion order."""
        return self._parameters.items()

    def update(self, parameters: Mapping | Iterable) -> None:
        """Add or replace entries from a mapping or an iterable of (key, value) pairs.

        Like PyTorch, a plain dict (not an OrderedDict or ParameterDict) is added in
        sorted key order, so the parameter order matches PyTorch's."""
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = parameters.items()
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = parameters
        for key, value in pairs:
            self[key] = value

    def pop(self, key: str) -> Parameter:
        """Remove and return the parameter under `key`."""
        p = self[key]
        del self[key]
        return p

    def extra_repr(self) -> str:
        """One line per parameter: `(key): Parameter containing: [dtype of size AxB]`."""
        return "\n".join(f"  ({k}): {_describe(p)}" for k, p in self.items())
