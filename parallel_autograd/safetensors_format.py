"""The safetensors format (https://github.com/huggingface/safetensors), written and read
directly: `pa.save(sd, "model.safetensors")`, `pa.load("model.safetensors")`.

A file is an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON
`{name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}` (padded with spaces to a multiple of 8), then the tensors'
bytes, little-endian, C order, at `data_offsets` relative to the end of the header. The
byte ranges are contiguous: they tile the data section exactly, in order.

It holds a flat dict of named tensors, such as a model's `state_dict()` with PyTorch's key
names, so files move between this library, PyTorch (`safetensors.torch`) and others.
Nothing but numbers is read: no code runs, nothing is unpickled.

`read` treats the file as untrusted, as `pa.load` does its own format: the header's
length, JSON nesting, names, dtypes, shapes and offsets are all checked against each
other and against the file's size before any tensor is allocated, and a malformed file
raises one ValueError saying what is wrong.

Thread safety: `write` reads the arrays without locks (do not write them concurrently);
`read` shares nothing.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from .tensor import Tensor

# safetensors' dtype names <-> numpy (little-endian). BF16 has no numpy dtype: it is read
# widened to float32 (exact), and cannot be written from numpy.
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1",
          "BOOL": "?"}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
_BF16 = "BF16"
MAX_HEADER = 100_000_000  # bytes; the reference implementation's own limit
_METADATA = "__metadata__"


class Malformed(ValueError):
    """What is wrong with the file, worded to follow 'load: <file> '."""


def write(tensors: dict, fh, metadata: dict | None = None) -> None:
    """Write the flat dict `tensors` (str name -> Tensor or ndarray) to the binary file
    `fh`. Raises TypeError for a nested value, a non-str key or a dtype safetensors
    cannot hold (complex, object, ...) before writing anything."""
    if not isinstance(tensors, dict):
        raise TypeError(f"save: the safetensors format holds a dict of tensors, got "
                        f"{type(tensors).__name__}")
    arrays = {name: _array_of(name, value) for name, value in tensors.items()}
    header, offset = {}, 0
    for name, a in arrays.items():
        header[name] = {"dtype": _NAMES[a.dtype.newbyteorder("<")], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("save: safetensors metadata maps str to str")
        header[_METADATA] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the tensors' bytes start 8-byte aligned
    fh.write(len(text).to_bytes(8, "little"))
    fh.write(text)
    for a in arrays.values():
        fh.write(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())


def _array_of(name, value) -> np.ndarray:
    if not isinstance(name, str):
        raise TypeError(f"save: safetensors names are str, got {name!r} of type "
                        f"{type(name).__name__}")
    if name == _METADATA:
        raise TypeError(f"save: {_METADATA!r} is reserved by the safetensors format")
    a = value._data if isinstance(value, Tensor) else value
    if not isinstance(a, np.ndarray):
        raise TypeError(f"save: the safetensors format holds tensors only, but [{name!r}] "
                        f"is a {type(value).__name__} (a model's state_dict() fits; save "
                        "nested state such as an optimizer's in the default .npz format)")
    if a.dtype.newbyteorder("<") not in _NAMES:
        raise TypeError(f"save: [{name!r}] has dtype {a.dtype}, which the safetensors "
                        f"format cannot hold here (it holds {', '.join(DTYPES)})")
    return a


def read(fh, size: int) -> dict:
    """The dict of leaf Tensors (requires_grad False, as PyTorch's state_dict) in the
    safetensors file `fh`, whose remaining `size` bytes are the file. Raises Malformed."""
    if size < 8:
        raise Malformed(f"is not a safetensors file: {size} bytes, shorter than the 8-byte "
                        "header length")
    n = int.from_bytes(_exactly(fh, 8, "the header length"), "little")
    if n > min(size - 8, MAX_HEADER):
        raise Malformed(f"is not a safetensors file: its header length {n} exceeds the "
                        f"{size - 8} bytes after it" if n > size - 8 else
                        f"is not a safetensors file: its header length {n} exceeds the "
                        f"format's limit of {MAX_HEADER} bytes")
    entries = _parse_header(_exactly(fh, n, "the header"))
    plan = _plan(entries, size - 8 - n)
    start = fh.tell()
    out = {}
    for name, (dtype, shape, begin, end) in plan.items():
        fh.seek(start + begin)
        out[name] = Tensor._wrap(_read_array(fh, name, dtype, shape, end - begin))
    return out


def _exactly(fh, n: int, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise Malformed(f"is truncated: {what} needs {n} bytes, the file has {len(data)}")
    return data


def json_depth(raw: bytes) -> int:
    """How deep the JSON text nests (this format's header and serialization's npz
    manifest), counted without parsing it (json.loads recurses) in linear time and ~10
    bytes per byte of text: brackets count outside strings, a string runs between quotes
    not escaped by an odd run of backslashes. (A regex over
    the strings was quadratic on '"\\"\\...': 20 s for 32 KB.)"""
    b = np.frombuffer(raw, dtype=np.uint8)
    index = np.int32 if b.size < 2**31 else np.int64
    last = np.arange(b.size, dtype=index)  # the last byte at or before i that is no backslash
    last[b == ord("\\")] = -1
    np.maximum.accumulate(last, out=last)
    quotes = np.flatnonzero(b == ord('"'))
    before = np.where(quotes > 0, last[np.maximum(quotes - 1, 0)], -1)
    quotes = quotes[(quotes - 1 - before) % 2 == 0]  # the backslashes before it: even
    del last, before
    toggle = np.zeros(b.size, np.uint8)
    toggle[quotes] = 1
    inside = (np.cumsum(toggle, dtype=np.uint8) & 1).astype(bool)  # (wraps at 256: even)
    step = (b == ord("[")).astype(np.int8)
    step += b == ord("{")
    step -= b == ord("]")
    step -= b == ord("}")
    step[inside] = 0
    return int(np.cumsum(step, dtype=index).max(initial=0))


def _parse_header(raw: bytes) -> dict:
    if json_depth(raw) > 3:  # {name: {"shape": [..]}}: a real header nests 3 deep
        raise Malformed("has a damaged header: its JSON nests deeper than a safetensors "
                        "header (3 levels)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except Malformed:
        raise
    except (UnicodeDecodeError, ValueError) as e:
        raise Malformed(f"is not a safetensors file: its header is not JSON "
                        f"({type(e).__name__}: {str(e)[:200]})") from e
    if not isinstance(header, dict):
        raise Malformed(f"is not a safetensors file: its header is a "
                        f"{type(header).__name__}, not an object")
    meta = header.pop(_METADATA, {})
    if not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise Malformed("has a damaged header: __metadata__ is not an object of strings")
    return header


def _no_duplicates(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise Malformed(f"has a damaged header: it names {_short(k)} twice")
        out[k] = v
    return out


def _plan(entries: dict, data_size: int) -> dict:
    """{name: (dtype, shape, begin, end)} in file order, every entry checked; the byte
    ranges must tile [0, data_size) exactly (as the reference reader requires: no hole,
    no overlap, so no two tensors alias and every byte is accounted for)."""
    plan = {name: _entry(name, e) for name, e in entries.items()}
    order = sorted(plan.items(), key=lambda item: (item[1][2], item[1][3]))
    at = 0
    for name, (_, _, begin, end) in order:
        if begin != at:
            raise Malformed(f"has a damaged header: {_short(name)} starts at byte {begin} "
                            f"of the data, where {at} was expected (ranges must be "
                            "contiguous, without holes or overlaps)")
        at = end
    if at != data_size:
        raise Malformed(f"has a damaged header: its tensors take {at} bytes, but the file "
                        f"holds {data_size} bytes of data")
    return dict(order)


def _entry(name: str, e) -> tuple:
    where = f"has a damaged header: the entry {_short(name)}"
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise Malformed(f"{where} is not an object with dtype, shape and data_offsets")
    dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
    if not isinstance(dtype, str) or (dtype not in DTYPES and dtype != _BF16):
        raise Malformed(f"{where} has dtype {_short(dtype)}, which load cannot read "
                        f"(it reads {', '.join(DTYPES)}, {_BF16})")
    if not (isinstance(shape, list) and all(_is_count(n) for n in shape)):
        raise Malformed(f"{where} has shape {_short(shape)}, not a list of sizes >= 0")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(_is_count(n) for n in offsets) and offsets[0] <= offsets[1]):
        raise Malformed(f"{where} has data_offsets {_short(offsets)}, not [begin, end] "
                        "with 0 <= begin <= end")
    itemsize = 2 if dtype == _BF16 else np.dtype(DTYPES[dtype]).itemsize
    want = math.prod(shape) * itemsize
    if offsets[1] - offsets[0] != want:
        raise Malformed(f"{where} declares shape {shape} of {dtype} ({want} bytes) but "
                        f"spans {offsets[1] - offsets[0]} bytes")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _is_count(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _read_array(fh, name: str, dtype: str, shape: tuple, nbytes: int) -> np.ndarray:
    """Read straight into the result's own buffer (no second copy of the data)."""
    stored = np.dtype("<u2" if dtype == _BF16 else DTYPES[dtype])
    a = np.empty(shape, stored)
    if nbytes and fh.readinto(memoryview(a).cast("B")) != nbytes:
        raise Malformed(f"is truncated: the data of {_short(name)} ends early")
    if dtype == _BF16:  # bfloat16 is float32's upper half: widening is exact
        return (a.astype("<u4") << 16).view("<f4").astype(np.float32)
    return a.astype(a.dtype.newbyteorder("="), copy=False)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_safetensors_path(f) -> bool:
    """A path named *.safetensors (the format `save` and `load` choose by default)."""
    return isinstance(f, (str, os.PathLike)) and os.fspath(f).endswith(".safetensors")
