"""Containers: `Sequential`, `ModuleList`, `ModuleDict` (PyTorch's semantics: children
are named "0", "1", ... or by their keys, which is what the state-dict names use)."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Iterable, Iterator, Mapping

from ..module import Module, _add_indent


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
