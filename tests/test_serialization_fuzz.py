"""Fuzzing pa.load: whatever the bytes, it returns a well-formed result or raises one
ValueError naming the file, and never allocates more than the file justifies.

Three layers, so mutations reach each parser rather than all stopping at the zip CRC:
raw bytes of whole files (zip directory, local headers, truncation), the bytes of one
member re-zipped with a valid CRC (.npy headers, array data, manifest text), and the
manifest's JSON tree (Hypothesis: crafted entries, duplicates, wrong types, nesting).
"""
from __future__ import annotations

import io
import json
import tracemalloc
import zipfile

import numpy as np
import pytest

import parallel_autograd as pa

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402 (after the skip)
from hypothesis import strategies as st  # noqa: E402

# Peak allocation allowed per byte the load may read (the file, or max_bytes): array
# data takes at most 1x, the manifest's JSON objects ~30x its length (measured <= 31x
# for the worst JSON shapes), plus zipfile's and the .npy reader's fixed buffers.
_PER_BYTE = 40
_FIXED = 2**20


def _state_dicts() -> list:
    """Valid objects of several kinds: a model's and an optimizer's state dicts,
    nested containers, tensors and arrays of many dtypes and layouts, scalars."""
    rng = np.random.default_rng(0)
    model = pa.nn.Sequential(pa.nn.Linear(4, 3), pa.nn.ReLU(), pa.nn.Linear(3, 2))
    opt = pa.optim.Adam(model.parameters())
    model(pa.randn(5, 4)).sum().backward()
    opt.step()
    dtypes = [np.float16, np.float32, np.float64, np.complex64, np.int8, np.int64,
              np.uint16, np.bool_]
    arrays = {np.dtype(d).name: (rng.standard_normal(6) * 5).astype(d) for d in dtypes}
    return [
        {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3},
        arrays,
        {"t": [pa.tensor(rng.standard_normal((2, 3)), requires_grad=True),
               pa.tensor(np.ones(3, np.float32)), pa.tensor(np.arange(4))],
         "fortran": np.asfortranarray(rng.standard_normal((3, 4))),
         "empty": np.zeros((0, 3)), "strings": np.array(["ab", "[{\"c"]),
         "dates": np.array(["2024-01-02"], "M8[D]"),
         "struct": np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2", (2,))])},
        {"nest": [1, (2.5, None, {"k": [True, "s", np.float32(1.5)]}), {}], 7: np.int64(3),
         "deep": [[[[[[{"x": np.ones(2)}]]]]]], "nan": float("nan")},
    ]


def _recompress(data: bytes, method: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", method) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def _valid_files() -> list:
    """(bytes, max_bytes) for each kind, stored as save writes it and deflated."""
    files = []
    for obj in _state_dicts():
        buf = io.BytesIO()
        pa.save(obj, buf)
        data = buf.getvalue()
        files.append((data, None))
        files.append((_recompress(data, zipfile.ZIP_DEFLATED), len(data)))
    return files


def _arrays_of(obj) -> list:
    """The ndarrays in a loaded result (a tensor's data included), without recursion."""
    out, todo = [], [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        elif isinstance(x, (pa.Tensor, np.ndarray)):
            out.append(x.numpy() if isinstance(x, pa.Tensor) else x)
    return out


def _well_formed(obj, most: int) -> bool:
    """Only what a state dict holds, at any depth (checked without recursion); its
    arrays take at most `most` bytes and no two share memory (two entries aliasing one
    buffer without sharing a version counter would hide in-place writes)."""
    arrays = _arrays_of(obj)
    if sum(a.nbytes for a in arrays) > most:
        return False
    if any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[:i]
           if a.size and b.size):
        return False
    todo = [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in x):
                return False
            todo.extend(x.values())
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        elif isinstance(x, pa.Tensor):
            if not x.is_leaf or x.numpy().dtype.hasobject:
                return False
        elif isinstance(x, (np.ndarray, np.generic)):
            if x.dtype.hasobject:
                return False
        elif not (x is None or isinstance(x, (bool, int, float, str))):
            return False
    return True


def _check_load(data: bytes, max_bytes=None, format=None) -> bool:
    """Load `data`; assert it is a well-formed result or exactly one ValueError and
    that the peak allocation is bounded. True if it loaded."""
    tracemalloc.start()
    try:
        got = pa.load(io.BytesIO(data), max_bytes=max_bytes, format=format)
    except Exception as e:  # noqa: BLE001 - asserted below
        got = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if isinstance(got, BaseException):
        assert type(got) is ValueError, f"{type(got).__name__}: {got}"
        assert str(got).startswith("load: the file "), got
    else:
        assert _well_formed(got, max(len(data), max_bytes or 0)), got
    assert peak <= _PER_BYTE * max(len(data), max_bytes or 0) + _FIXED, (peak, len(data))
    if format == "safetensors" and not isinstance(got, BaseException):
        assert all(isinstance(k, str) and isinstance(v, pa.Tensor) for k, v in got.items())
    return not isinstance(got, BaseException)


def _mutate_bytes(data: bytes, rng) -> bytes:
    b = bytearray(data)
    how = rng.integers(6)
    if how == 0:  # a few random bytes
        for at in rng.integers(len(b), size=rng.integers(1, 9)):
            b[at] = rng.integers(256)
    elif how == 1:  # a few bit flips
        for at in rng.integers(len(b), size=rng.integers(1, 5)):
            b[at] ^= 1 << int(rng.integers(8))
    elif how == 2:  # truncation
        del b[rng.integers(len(b)):]
    elif how == 3:  # a field of the zip structures (sizes, offsets, flags) set to extremes
        at = _zip_field(b, rng)
        width = int(rng.choice([2, 4]))
        value = int(rng.choice([0, 1, 0xFFFF, 0xFFFFFFFF, 2**31, rng.integers(2**16)]))
        b[at:at + width] = (value % 2**(8 * width)).to_bytes(width, "little")
    elif how == 4:  # bytes inserted or removed in the middle
        at = rng.integers(len(b))
        if rng.integers(2):
            b[at:at] = bytes(rng.integers(256, size=rng.integers(1, 16)).astype(np.uint8))
        else:
            del b[at:at + rng.integers(1, 64)]
    else:  # a range duplicated (entries repeated, directory overlapping itself)
        start = rng.integers(len(b))
        piece = b[start:start + rng.integers(1, 256)]
        at = rng.integers(len(b))
        b[at:at] = piece
    return bytes(b)


def _zip_field(b: bytearray, rng) -> int:
    """An offset inside a zip header record (local, central directory or end record),
    where the unchecksummed fields are."""
    marks = [i for sig in (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06")
             for i in _find_all(b, sig)]
    return int(rng.choice(marks)) + int(rng.integers(4, 30)) if marks else 0


def _find_all(b: bytearray, sig: bytes) -> list:
    out, at = [], b.find(sig)
    while at >= 0:
        out.append(at)
        at = b.find(sig, at + 1)
    return out


def _mutate_member(data: bytes, rng) -> bytes:
    """One member's bytes mutated (its .npy header most often), re-zipped with a valid
    CRC and the same compression."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        members = [(i.filename, bytearray(z.read(i)), i.compress_type) for i in infos]
    name, body, _ = members[rng.integers(len(members))]
    if len(body) == 0:
        return data
    head = min(len(body), 128 if rng.integers(3) else len(body))
    for at in rng.integers(head, size=rng.integers(1, 5)):
        body[at] = rng.choice([rng.integers(256), ord("("), ord("["), ord("'"), ord("9"),
                               ord(","), ord("{"), ord("\\"), 0])
    if rng.integers(4) == 0:
        del body[rng.integers(len(body)):]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n, b, m in members:
            z.writestr(n, bytes(body) if n == name else bytes(b), compress_type=m)
    return out.getvalue()


_QUIET = pytest.mark.filterwarnings(  # numpy's header parser warns on garbled escapes
    "ignore::DeprecationWarning", "ignore::SyntaxWarning")


@_QUIET
@pytest.mark.timeout(300)
def test_fuzz_bytes_and_members_of_valid_files():
    files = _valid_files()
    for data, max_bytes in files:  # the unmutated files load
        assert _check_load(data, max_bytes)
    rng = np.random.default_rng(2024)
    loaded = refused = 0
    for n in range(1600):
        data, max_bytes = files[n % len(files)]
        bad = _mutate_bytes(data, rng) if n % 2 else _mutate_member(data, rng)
        if _check_load(bad, max_bytes):
            loaded += 1
        else:
            refused += 1
    assert refused > 1000 and loaded > 0  # the mutations do reach the checks


def _entry(children):
    """An entry of the manifest's tree, valid or crafted."""
    key = st.sampled_from(["a0", "a1", "a2", "__manifest__", "missing"])
    leaf = st.one_of(
        st.fixed_dictionaries({"t": st.just("value"),
                               "v": st.one_of(st.none(), st.booleans(), st.integers(),
                                              st.floats(), st.text(max_size=5))}),
        st.fixed_dictionaries({"t": st.just("tensor"), "a": key,
                               "rg": st.one_of(st.booleans(), st.integers(0, 1))}),
        st.fixed_dictionaries({"t": st.sampled_from(["array", "scalar"]), "a": key}),
        st.fixed_dictionaries({"t": st.one_of(st.text(max_size=6), st.integers())}),
        st.none(), st.integers(), st.text(max_size=4))
    if children is None:
        return leaf
    pair = st.one_of(st.tuples(st.one_of(st.text(max_size=3), st.integers(-2, 2),
                                         st.booleans(), st.none()), children).map(list),
                     st.lists(children, max_size=3))
    return st.one_of(
        leaf,
        st.fixed_dictionaries({"t": st.sampled_from(["list", "tuple"]),
                               "items": st.lists(children, max_size=4)}),
        st.fixed_dictionaries({"t": st.just("dict"), "items": st.lists(pair, max_size=4)}),
        st.fixed_dictionaries({"t": st.sampled_from(["dict", "list"]),
                               "items": st.one_of(st.integers(), st.text(max_size=3))}))


_TREES = st.recursive(_entry(None), _entry, max_leaves=12)
_ARRAYS = {"a0": np.ones(4096), "a1": np.array(2.5, np.float32), "a2": np.arange(4)}


@_QUIET
@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(tree=_TREES, deflate=st.booleans(), nest=st.sampled_from([0, 0, 0, 60, 120, 700]))
def test_fuzz_crafted_manifests(tree, deflate, nest):
    for _ in range(nest):  # sometimes near or past the nesting bound
        tree = {"t": "list", "items": [tree]}
    text = json.dumps({"format": "parallel_autograd.save/1", "tree": tree})
    members = {f"{k}.npy": _npy(v) for k, v in _ARRAYS.items()}
    members["__manifest__.npy"] = _npy(np.frombuffer(text.encode(), np.uint8))
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", method) as z:
        for name, body in members.items():
            z.writestr(name, body)
    _check_load(out.getvalue(), 10**5 if deflate else None)


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


# ---- the safetensors reader (pa.load(..., format="safetensors"), *.safetensors) ---------
def _safetensors_files() -> list:
    rng = np.random.default_rng(1)
    model = pa.nn.Sequential(pa.nn.Linear(4, 3), pa.nn.BatchNorm1d(3), pa.nn.Linear(3, 2))
    dtypes = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_]
    files = []
    for sd in (model.state_dict(),
               {np.dtype(d).name: (rng.standard_normal((2, 3)) * 5).astype(d) for d in dtypes},
               {"s": np.array(1.5), "e": np.zeros((0, 2)), "f": np.ones((3, 1), np.float32)}):
        buf = io.BytesIO()
        pa.save(sd, buf, format="safetensors")
        files.append(buf.getvalue())
    return files


def _mutate_header(data: bytes, rng) -> bytes:
    """A few characters of the JSON header changed to ones that matter to it (digits,
    brackets, quotes, commas), the header length kept or set to an extreme."""
    b = bytearray(data)
    n = int.from_bytes(b[:8], "little")
    for at in rng.integers(8, 8 + n, size=rng.integers(1, 4)):
        b[at] = int(rng.choice([ord(c) for c in '0123456789[]{}",:-. e']))
    if rng.integers(4) == 0:
        lengths = [0, 1, n - 1, n + 1, n + 8, 2**63, 2**64 - 1]
        b[:8] = lengths[rng.integers(len(lengths))].to_bytes(8, "little")
    return bytes(b)


@pytest.mark.timeout(300)
def test_fuzz_safetensors_bytes_and_headers():
    files = _safetensors_files()
    for data in files:
        assert _check_load(data, format="safetensors")
    rng = np.random.default_rng(2025)
    loaded = refused = 0
    for n in range(1200):
        data = files[n % len(files)]
        bad = _mutate_bytes(data, rng) if n % 2 else _mutate_header(data, rng)
        if _check_load(bad, format="safetensors"):
            loaded += 1
        else:
            refused += 1
    assert refused > 600 and loaded > 0  # the mutations do reach the checks


_COUNT = st.one_of(st.integers(-2, 40), st.just(2**64), st.floats(0, 8), st.booleans(),
                   st.none(), st.text(max_size=2))
_ST_ENTRY = st.one_of(
    st.fixed_dictionaries({
        "dtype": st.one_of(st.sampled_from(["F64", "F32", "F16", "BF16", "I8", "U8", "BOOL",
                                            "F8_E4M3", "C64", "f64"]), st.integers()),
        "shape": st.one_of(st.lists(_COUNT, max_size=3), _COUNT),
        "data_offsets": st.one_of(st.lists(_COUNT, max_size=3), _COUNT)}),
    st.dictionaries(st.sampled_from(["dtype", "shape", "data_offsets", "x"]), _COUNT,
                    max_size=4),
    st.lists(_COUNT, max_size=2), _COUNT)


@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "__metadata__"]),
                                  _ST_ENTRY), max_size=4),
       data=st.binary(max_size=64), pad=st.sampled_from([0, 0, 1, 7, 300]))
def test_fuzz_crafted_safetensors_headers(entries, data, pad):
    # duplicate names are kept in the text (json.dumps of a dict would merge them)
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in entries) + "}"
    text = "[" * pad + text + "]" * pad if pad > 100 else text + " " * pad
    raw = text.encode()
    _check_load(len(raw).to_bytes(8, "little") + raw + data, format="safetensors")
