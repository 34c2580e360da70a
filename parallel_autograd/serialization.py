"""`save` / `load`: state dicts to a file that never runs code when read.

The format is numpy's `.npz` (a zip of `.npy` arrays) read with `allow_pickle=False`:
each tensor or array is one member (`a0`, `a1`, ...), and the member `__manifest__`
holds a JSON description of the structure (version, nested dicts/lists/tuples, keys,
Python numbers, strings, booleans and None, and which arrays are tensors with
`requires_grad`). Object arrays are refused at save time, so loading never unpickles.

`load` treats the file as untrusted: before it allocates anything it checks the
manifest (each array named once, containers at most `MAX_DEPTH` deep) and every
member's declared sizes (zip directory, `.npy` header) against each other and
against its `max_bytes` limit; anything malformed raises one ValueError naming the
entry or member and what is wrong.

Thread safety: `save` reads the tensors' arrays without locks (do not write them
concurrently); `load` shares nothing.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import zipfile

import numpy as np

from .device import check_device, device
from . import safetensors_format
from .tensor import FLOAT_KINDS, Tensor

_FORMAT = "parallel_autograd.save/1"
_MANIFEST = "__manifest__"
MAX_DEPTH = 100  # containers inside containers; state dicts nest a handful deep
# A container entry nests its children 2 (list, tuple) or 3 (dict: items, pair)
# JSON levels deeper; the tree sits at level 2 of the manifest object.
_MAX_JSON_DEPTH = 3 * MAX_DEPTH + 4
_MAX_HEADER = 10000  # bytes of .npy header, numpy's own default for np.load
_CONTAINERS = ("dict", "list", "tuple")
_ARRAYS = ("tensor", "array", "scalar")
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # np.savez, np.savez_compressed


class _Bad(ValueError):
    """What is wrong with the file, worded to follow 'load: <file> '."""


def save(obj, f, *, format: str | None = None) -> None:
    """Write `obj` (a state dict: nested dicts with str or int keys, lists, tuples,
    Tensors, ndarrays, Python numbers, strings, booleans and None) to `f` (a path or a
    binary file). Raises TypeError naming the first value it cannot store, ValueError
    if containers nest more than `MAX_DEPTH` deep (which `load` would refuse).

    `format`: "npz" (this library's, any state dict) or "safetensors" (a flat dict of
    tensors such as a model's `state_dict()`, which PyTorch and others read); default:
    "safetensors" for a path ending in .safetensors, else "npz"."""
    if _format(f, format, "save") == "safetensors":
        with open(f, "wb") if isinstance(f, (str, os.PathLike)) \
                else contextlib.nullcontext(f) as fh:
            safetensors_format.write(obj, fh)
        return
    arrays = {}
    tree = _encode(obj, arrays, "obj", 0)
    manifest = json.dumps({"format": _FORMAT, "tree": tree}, allow_nan=True)
    arrays[_MANIFEST] = np.frombuffer(manifest.encode(), dtype=np.uint8)
    if isinstance(f, (str, os.PathLike)):  # exactly this path (np.savez would add .npz)
        with open(f, "wb") as fh:
            np.savez(fh, **arrays)
    else:
        np.savez(f, **arrays)


def _format(f, format: str | None, who: str) -> str:
    if format is None:
        return "safetensors" if safetensors_format.is_safetensors_path(f) else "npz"
    if format not in ("npz", "safetensors"):
        raise ValueError(f"{who}: format must be 'npz', 'safetensors' or None, got {format!r}")
    return format


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None,
         mmap: bool | None = None, max_bytes: int | None = None, format: str | None = None,
         **pickle_load_args) -> object:
    """Read what `save` wrote: Tensors come back as leaf Tensors (with their
    `requires_grad`), arrays as ndarrays. A safetensors file (`format`, default by the
    .safetensors extension as in `save`) gives a dict of leaf Tensors that do not
    require grad.

    PyTorch's `torch.load` arguments are accepted for ported code and change nothing:
    `map_location` (None, "cpu", a CPU `pa.device`/`torch.device`, a dict whose targets
    are the CPU, or a callable, which is never called: there are no storages to map) --
    a non-CPU target raises `DeviceUnavailableError` before the file is read;
    `weights_only` (loading never runs code from the file: always "weights only"),
    `pickle_module`, `mmap` and `**pickle_load_args` (the format is not pickle).

    `f`: a path or a seekable binary file. `max_bytes`: the most the members read
    (the arrays and the manifest) may take once decompressed; default the file's own
    size, which every file `save` writes satisfies (it stores members uncompressed),
    so only a compressed file needs a larger value. Array memory never exceeds it;
    parsing the manifest takes at most ~30x the manifest's length in Python objects.

    Raises ValueError, naming the entry or member and what is wrong, for any file
    that is not such a file: truncated, corrupted, foreign, from a newer format, an
    array named twice, declared sizes that disagree or exceed `max_bytes`, nesting
    deeper than `MAX_DEPTH`. A path that cannot be opened raises OSError as `open`."""
    _check_map_location(map_location)
    kind = _format(f, format, "load")
    if max_bytes is not None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool):
            raise TypeError(f"load: max_bytes must be an int or None, got "
                            f"{type(max_bytes).__name__}")
        if max_bytes < 0:
            raise ValueError(f"load: max_bytes must be >= 0, got {max_bytes}")
    path = isinstance(f, (str, os.PathLike))
    name = os.fspath(f) if path else getattr(f, "name", "the file")
    with open(f, "rb") if path else contextlib.nullcontext(f) as fh:
        try:
            if kind == "safetensors":
                return _load_safetensors(fh, max_bytes)
            return _load(fh, max_bytes)
        except (_Bad, safetensors_format.Malformed) as e:
            raise ValueError(f"load: {name} {e}") from e.__cause__


def _check_map_location(map_location) -> None:
    """torch.load's `map_location`, which must map everything to the CPU."""
    if map_location is None or callable(map_location):
        return
    targets = map_location.values() if isinstance(map_location, dict) else [map_location]
    for t in targets:
        if not isinstance(t, (str, device)) and type(t).__name__ != "device":
            raise TypeError(f"load: map_location must be a string, a device, a dict or a "
                            f"callable, got {type(t).__name__}")
        check_device(t, "load: map_location")


def _load(fh, max_bytes: int | None):
    limit = _stream_size(fh) if max_bytes is None else max_bytes
    how = ("max_bytes" if max_bytes is not None
           else "by default the file's size; a compressed file needs a larger max_bytes")
    try:
        z = zipfile.ZipFile(fh)
    except Exception as e:  # zipfile raises a dozen types on crafted directories
        raise _Bad(f"is not a parallel_autograd save file (not a readable zip: {_why(e)})") \
            from e
    with z:
        members = _members(z)
        tree = _read_manifest(z, members, limit, how)
        refs = {}
        _walk(tree, lambda t, node, where: _note_ref(t, node, where, refs))
        plans = _plan(z, members, refs, limit, how)
        arrays = {key: _read_array(z, plan) for key, plan in plans.items()}
    return _walk(tree, lambda t, node, where: _value(t, node, arrays))


def _load_safetensors(fh, max_bytes: int | None) -> dict:
    size = _stream_size(fh)
    if max_bytes is not None and size > max_bytes:  # everything read is in the file
        raise _Bad(f"would take up to {size} bytes, more than the limit of {max_bytes} "
                   "bytes (max_bytes)")
    return safetensors_format.read(fh, size)


def _stream_size(fh) -> int:
    try:
        pos = fh.tell()
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        fh.seek(pos)
        return int(end - pos)
    except (AttributeError, OSError, ValueError, TypeError) as e:
        raise _Bad(f"cannot be read: load needs a path or a seekable binary file "
                   f"({_why(e)})") from e


def _why(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text[:200]}{'...' if len(text) > 200 else ''}"


def _members(z: zipfile.ZipFile) -> dict:
    members = {}
    for info in z.infolist():
        if info.filename in members:
            raise _Bad(f"is damaged: it holds member {info.filename} twice")
        if info.compress_type not in _METHODS:
            # LZMA's decoder allocates the dictionary size its stream declares (up to
            # 4 GiB) before any output; numpy writes only these two methods
            raise _Bad(f"is not a parallel_autograd save file (member {info.filename} is "
                       f"compressed with zip method {info.compress_type}; load reads "
                       "stored or deflated members, as numpy writes them)")
        members[info.filename] = info
    if _MANIFEST + ".npy" not in members:
        raise _Bad("is not a parallel_autograd save file "
                   "(it has no manifest: not written by parallel_autograd.save)")
    return members


def _read_manifest(z, members: dict, limit: int, how: str):
    info = members[_MANIFEST + ".npy"]
    _check_total(info.file_size, limit, how)
    with _member(info, "the manifest"), z.open(info) as fh:
        shape, dtype, start = _header(fh)
        if dtype != np.uint8 or len(shape) != 1 or start + shape[0] != info.file_size:
            raise _Bad(f"is damaged: its manifest is a {dtype} array of shape {shape} "
                       f"in {info.file_size} bytes, not the bytes of a JSON text")
        raw = fh.read(shape[0] + 1)
    if len(raw) != shape[0]:
        raise _Bad("is damaged: its manifest is shorter or longer than its header says")
    return _parse_manifest(raw)


def _parse_manifest(raw: bytes):
    depth = safetensors_format.json_depth(raw)
    if depth > _MAX_JSON_DEPTH:
        raise _Bad(f"has a damaged manifest: it nests {depth} levels deep, more than a file "
                   f"save writes (containers nest at most {MAX_DEPTH} deep)")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _Bad(f"is not a parallel_autograd save file (its manifest is not JSON: "
                   f"{_why(e)})") from e
    if not isinstance(meta, dict):
        raise _Bad(f"is not a parallel_autograd save file (its manifest is a "
                   f"{type(meta).__name__}, not an object)")
    if meta.get("format") != _FORMAT:
        raise _Bad(f"is not a parallel_autograd save file (unknown format "
                   f"{str(meta.get('format'))[:100]!r})")
    if "tree" not in meta:
        raise _Bad("has a damaged manifest: it has no tree")
    return meta["tree"]


def _header(fh) -> tuple:
    """(shape, dtype, data offset) of the .npy stream `fh`, allocating nothing more."""
    version = np.lib.format.read_magic(fh)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise ValueError(f".npy format version {version} is not one numpy writes")
    # 3.0 differs from 2.0 only in the header's text encoding (utf-8 field names),
    # which changes no size; read_array parses it exactly later.
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) \
        else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(fh, max_header_size=_MAX_HEADER)
    if any(n < 0 for n in shape):
        raise ValueError(f"its header declares a negative dimension in shape {shape}")
    return shape, dtype, fh.tell()


@contextlib.contextmanager
def _member(info, what: str):
    """Turn whatever zipfile, zlib/bz2/lzma and numpy's .npy reader raise on a crafted
    or corrupted member (BadZipFile, NotImplementedError, EOFError, zlib.error,
    tokenize.TokenError, SyntaxError, MemoryError, ...) into one ValueError naming it."""
    try:
        yield
    except _Bad:
        raise
    except Exception as e:
        raise _Bad(f"is damaged: {what} (member {info.filename}) cannot be read "
                   f"({_why(e)})") from e


def _walk(tree, leaf):
    """Build the value of the manifest's `tree` bottom-up on an explicit stack
    (the manifest is untrusted: no recursion); `leaf(kind, node, where)` gives each
    leaf entry's value. Every entry is checked on the way (`_kind`, `_children`)."""
    values = []
    todo = [(tree, None, 0, None)]  # node, where, depth, its children's keys once pushed
    while todo:
        node, where, depth, keys = todo.pop()
        if keys is not None:  # every child is built: they are the last len(keys) values
            got = values[len(values) - len(keys):]
            del values[len(values) - len(keys):]
            kind = node["t"]
            values.append(dict(zip(keys, got)) if kind == "dict"
                          else got if kind == "list" else tuple(got))
            continue
        kind = _kind(node, where)
        if kind not in _CONTAINERS:
            values.append(leaf(kind, node, where))
            continue
        if depth == MAX_DEPTH:
            raise _damaged(where, f"nests containers more than {MAX_DEPTH} deep, "
                                  "deeper than save writes")
        keys, children = _children(kind, node, where)
        todo.append((node, where, depth, keys))
        todo.extend((children[i], (where, keys[i]), depth + 1, None)
                    for i in range(len(keys) - 1, -1, -1))
    return values[0]


def _kind(node, where) -> str:
    kind = node.get("t") if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise _damaged(where, f"is a JSON {type(node).__name__}, not an entry")
    if kind == "value":
        if "v" not in node or not (node["v"] is None
                                   or isinstance(node["v"], (bool, int, float, str))):
            raise _damaged(where, f"is a value entry holding "
                                  f"{type(node.get('v')).__name__}, not a number, string, "
                                  "boolean or None")
        return kind
    if kind in _ARRAYS:
        if not isinstance(node.get("a"), str) or node["a"] == _MANIFEST:
            raise _damaged(where, f"is a {kind} entry without an array name")
        if kind == "tensor" and not isinstance(node.get("rg"), bool):
            raise _damaged(where, "is a tensor entry without a requires_grad flag")
        return kind
    if kind in _CONTAINERS:
        return kind
    raise _damaged(where, f"has an unknown entry type {_short(kind)}")


def _children(kind: str, node: dict, where):
    """(keys, child entries) of a container entry, checked."""
    items = node.get("items")
    if not isinstance(items, list):
        raise _damaged(where, f"is a {kind} entry without a list of items")
    if kind != "dict":
        return range(len(items)), items
    keys, seen = [], set()
    for i, pair in enumerate(items):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise _damaged(where, f"is a dict entry whose item {i} is not a [key, value] pair")
        k = pair[0]
        if not isinstance(k, (str, int)) or isinstance(k, bool):
            raise _damaged(where, f"has a key {_short(k)} of type {type(k).__name__}; "
                                  "keys are str or int")
        if k in seen:
            raise _damaged(where, f"has the key {_short(k)} twice")
        seen.add(k)
        keys.append(k)
    return keys, [pair[1] for pair in items]


def _note_ref(kind: str, node: dict, where, refs: dict) -> None:
    """First pass: which member each array entry names, each named once (a file
    save wrote never names one twice; sharing would alias results, copying would
    let a small file demand any amount of memory)."""
    if kind == "value":
        return
    key = node["a"]
    if key in refs:
        raise _damaged(where, f"names the array {_short(key)} that "
                              f"{_path(refs[key][1])} already names")
    refs[key] = (kind, where, node.get("rg", False))


def _plan(z, members: dict, refs: dict, limit: int, how: str) -> dict:
    """Check every referenced member's declared sizes, before reading any array:
    the zip directory's sizes against `limit`, then each .npy header against its
    member's size. Returns {key: (ZipInfo, where, shape, dtype)}."""
    infos = {}
    total = members[_MANIFEST + ".npy"].file_size
    for key, (_, where, _) in refs.items():
        infos[key] = members.get(key + ".npy")
        if infos[key] is None:
            raise _damaged(where, f"names the array {_short(key)}, which the file does not hold")
        total += infos[key].file_size
    _check_total(total, limit, how)
    plans = {}
    for key, (kind, where, rg) in refs.items():
        info = infos[key]
        with _member(info, f"the array of {_path(where)}"), z.open(info) as fh:
            shape, dtype, start = _header(fh)
        count = math.prod(shape)
        if dtype.itemsize == 0:  # no data, but the elements still cost something
            total += count
        _check_array(info, where, kind, rg, shape, dtype, start)
        plans[key] = (info, where, shape, dtype)
    _check_total(total, limit, how)
    return plans


def _check_total(total: int, limit: int, how: str) -> None:
    if total > limit:
        raise _Bad(f"would take {total} bytes once decompressed, more than the limit of "
                   f"{limit} bytes ({how})")


def _check_array(info, where, kind: str, rg: bool, shape, dtype, start: int) -> None:
    held = info.file_size - start
    what = f"the array of {_path(where)} (member {info.filename})"
    if dtype.hasobject:
        raise _Bad(f"is damaged: {what} is an object array, which only unpickling could "
                   "read (load never unpickles)")
    if math.prod(shape) * dtype.itemsize != held:
        raise _Bad(f"is damaged: {what} declares shape {shape} of {dtype} "
                   f"({math.prod(shape) * dtype.itemsize} bytes) but holds {held} bytes")
    if kind == "scalar" and shape != ():
        raise _Bad(f"is damaged: {what} is a scalar entry but has shape {shape}")
    if kind == "tensor" and rg and dtype.kind not in FLOAT_KINDS:
        raise _Bad(f"is damaged: {what} is a tensor that requires grad, but holds {dtype} "
                   "(only floating point tensors can)")


def _read_array(z, plan) -> np.ndarray:
    info, where, shape, dtype = plan
    with _member(info, f"the array of {_path(where)}"), z.open(info) as fh:
        arr = np.lib.format.read_array(fh, allow_pickle=False, max_header_size=_MAX_HEADER)
        if fh.read(1):  # also makes zipfile check the CRC if not yet done
            raise ValueError("it has bytes after the array data")
    if arr.shape != shape or arr.dtype.itemsize != dtype.itemsize:
        raise _Bad(f"is damaged: member {info.filename} changed while being read")
    return arr


def _value(kind: str, node: dict, arrays: dict):
    """Second pass: a leaf entry's value (arrays are fresh and named once: no copy)."""
    if kind == "value":
        return node["v"]
    arr = arrays[node["a"]]
    if kind == "tensor":
        t = Tensor._wrap(arr)
        t.requires_grad = node["rg"]
        return t
    return arr if kind == "array" else arr[()]


def _damaged(where, what: str) -> _Bad:
    return _Bad(f"has a damaged manifest: {_path(where)} {what}")


def _path(where) -> str:
    """'obj[...][...]' from a (parent, key) chain (built only for error messages)."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(f"[{_short(key)}]")
    return "obj" + "".join(reversed(keys))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _encode(obj, arrays: dict, where: str, depth: int):
    if isinstance(obj, Tensor):
        return {"t": "tensor", "a": _store(obj._data, arrays, where),
                "rg": bool(obj.requires_grad)}
    if isinstance(obj, np.ndarray):
        return {"t": "array", "a": _store(obj, arrays, where)}
    if isinstance(obj, np.generic):
        return {"t": "scalar", "a": _store(np.asarray(obj), arrays, where)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"t": "value", "v": obj}
    if isinstance(obj, (dict, list, tuple)) and depth == MAX_DEPTH:
        raise ValueError(f"save: {where} nests containers more than {MAX_DEPTH} deep, which "
                         "load refuses (does a container contain itself?)")
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"save: {where} has a key {k!r} of type "
                                f"{type(k).__name__}; keys must be str or int")
            items.append([k, _encode(v, arrays, f"{where}[{k!r}]", depth + 1)])
        return {"t": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        return {"t": type(obj).__name__,
                "items": [_encode(v, arrays, f"{where}[{i}]", depth + 1)
                          for i, v in enumerate(obj)]}
    raise TypeError(f"save: {where} is a {type(obj).__name__}, which a state dict cannot "
                    "hold (tensors, arrays, numbers, strings, None, dicts, lists, tuples)")


def _store(a: np.ndarray, arrays: dict, where: str) -> str:
    if a.dtype.hasobject:
        raise TypeError(f"save: {where} is an object array, which could only be stored "
                        "by pickling")
    key = f"a{len(arrays)}"
    arrays[key] = a
    return key
