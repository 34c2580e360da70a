"""`save` / `load`: state dicts to a file that never runs code when read.

The format is numpy's `.npz` (a zip of `.npy` arrays) read with `allow_pickle=False`:
each tensor or array is one member (`a0`, `a1`, ...), and the member `__manifest__`
holds a JSON description of the structure (version, nested dicts/lists/tuples, keys,
Python numbers, strings, booleans and None, and which arrays are tensors with
`requires_grad`). Object arrays are refused at save time, so loading never unpickles.

Thread safety: `save` reads the tensors' arrays without locks (do not write them
concurrently); `load` shares nothing.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from .tensor import Tensor

_FORMAT = "parallel_autograd.save/1"
_MANIFEST = "__manifest__"


def save(obj, f) -> None:
    """Write `obj` (a state dict: nested dicts with str or int keys, lists, tuples,
    Tensors, ndarrays, Python numbers, strings, booleans and None) to `f` (a path or a
    binary file). Raises TypeError naming the first value it cannot store."""
    arrays = {}
    tree = _encode(obj, arrays, "obj")
    manifest = json.dumps({"format": _FORMAT, "tree": tree}, allow_nan=True)
    arrays[_MANIFEST] = np.frombuffer(manifest.encode(), dtype=np.uint8)
    if isinstance(f, (str, os.PathLike)):  # exactly this path (np.savez would add .npz)
        with open(f, "wb") as fh:
            np.savez(fh, **arrays)
    else:
        np.savez(f, **arrays)


def load(f) -> object:
    """Read what `save` wrote: Tensors come back as leaf Tensors (with their
    `requires_grad`), arrays as ndarrays. Raises ValueError if `f` is not such a file
    (truncated, foreign, or from a newer format)."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", "the file")
    try:
        npz = np.load(f, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("it is a single .npy array")
        with npz:
            if _MANIFEST not in npz.files:
                raise ValueError("it has no manifest (not written by parallel_autograd.save)")
            meta = json.loads(npz[_MANIFEST].tobytes().decode())
            if meta.get("format") != _FORMAT:
                raise ValueError(f"unknown format {meta.get('format')!r}")
            arrays = {k: npz[k] for k in npz.files if k != _MANIFEST}
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        raise ValueError(f"load: {name} is not a readable parallel_autograd save file "
                         f"({type(e).__name__}: {e})") from e
    except ValueError as e:
        raise ValueError(f"load: {name} is not a parallel_autograd save file ({e})") from e
    try:
        return _decode(meta["tree"], arrays)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"load: {name} has a damaged manifest ({type(e).__name__}: {e})") \
            from e


def _encode(obj, arrays: dict, where: str):
    if isinstance(obj, Tensor):
        return {"t": "tensor", "a": _store(obj.data, arrays, where),
                "rg": bool(obj.requires_grad)}
    if isinstance(obj, np.ndarray):
        return {"t": "array", "a": _store(obj, arrays, where)}
    if isinstance(obj, np.generic):
        return {"t": "scalar", "a": _store(np.asarray(obj), arrays, where)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"t": "value", "v": obj}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"save: {where} has a key {k!r} of type "
                                f"{type(k).__name__}; keys must be str or int")
            items.append([k, _encode(v, arrays, f"{where}[{k!r}]")])
        return {"t": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        return {"t": type(obj).__name__,
                "items": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]}
    raise TypeError(f"save: {where} is a {type(obj).__name__}, which a state dict cannot "
                    "hold (tensors, arrays, numbers, strings, None, dicts, lists, tuples)")


def _store(a: np.ndarray, arrays: dict, where: str) -> str:
    if a.dtype.hasobject:
        raise TypeError(f"save: {where} is an object array, which could only be stored "
                        "by pickling")
    key = f"a{len(arrays)}"
    arrays[key] = a
    return key


def _decode(node, arrays: dict):
    t = node["t"]
    if t == "value":
        return node["v"]
    if t == "tensor":
        return Tensor(arrays[node["a"]], requires_grad=node["rg"])
    if t == "array":
        return arrays[node["a"]]
    if t == "scalar":
        return arrays[node["a"]][()]
    if t == "dict":
        return {k: _decode(v, arrays) for k, v in node["items"]}
    if t in ("list", "tuple"):
        items = [_decode(v, arrays) for v in node["items"]]
        return items if t == "list" else tuple(items)
    raise ValueError(f"unknown entry type {t!r}")
