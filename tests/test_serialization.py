"""pa.save / pa.load: state dicts in .npz, never unpickled."""
from __future__ import annotations

import io
import json
import re
import tracemalloc
import zipfile

import numpy as np
import pytest

import parallel_autograd as pa


def _state():
    w = pa.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    return {
        "model": {"linear.weight": w, "linear.bias": pa.tensor(np.zeros(2)),
                  "running": np.arange(3, dtype=np.float32)},
        "optim": {"state": {0: {"step": 3, "exp_avg": np.ones(4)}},
                  "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1],
                                    "nesterov": False, "name": None, "eps": float("inf")}]},
        "epoch": 7, "scalar": np.float32(2.5),
    }


def test_round_trip_keeps_structure_values_dtypes_and_requires_grad(tmp_path):
    path = tmp_path / "ckpt.pt"
    pa.save(_state(), path)
    assert path.exists()  # exactly this name: no .npz appended
    got = pa.load(path)
    want = _state()
    w = got["model"]["linear.weight"]
    assert isinstance(w, pa.Tensor) and w.requires_grad and w.is_leaf
    assert np.array_equal(w.numpy(), want["model"]["linear.weight"].numpy())
    assert not got["model"]["linear.bias"].requires_grad
    assert got["model"]["running"].dtype == np.float32
    assert got["optim"]["state"][0]["step"] == 3  # int keys stay ints
    g = got["optim"]["param_groups"][0]
    assert g["betas"] == (0.9, 0.999) and isinstance(g["betas"], tuple)
    assert g["params"] == [0, 1] and g["name"] is None and g["eps"] == float("inf")
    assert got["epoch"] == 7 and got["scalar"] == np.float32(2.5)
    assert type(got["scalar"]) is np.float32


def test_file_objects_work_and_the_file_is_a_plain_npz():
    buf = io.BytesIO()
    pa.save({"x": pa.tensor([1.0, 2.0])}, buf)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:  # readable without this library
        assert "__manifest__" in npz.files
    buf.seek(0)
    assert np.array_equal(pa.load(buf)["x"].numpy(), [1.0, 2.0])


def test_what_a_state_dict_cannot_hold_is_refused_by_name(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['f'\] is a function"):
        pa.save({"f": lambda: 0}, tmp_path / "a")
    with pytest.raises(TypeError, match="object array"):
        pa.save({"o": np.array([object()])}, tmp_path / "b")
    with pytest.raises(TypeError, match="keys must be str or int"):
        pa.save({(1, 2): 0}, tmp_path / "c")


def test_truncated_foreign_or_pickled_files_give_a_clear_error(tmp_path):
    good = tmp_path / "good"
    pa.save(_state(), good)
    data = good.read_bytes()
    (tmp_path / "cut").write_bytes(data[: len(data) // 2])
    (tmp_path / "text").write_bytes(b"hello, not a checkpoint")
    np.savez(tmp_path / "plain.npz", x=np.ones(2))
    np.save(tmp_path / "array.npy", np.ones(3))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name in ("cut", "text", "plain.npz", "array.npy", "pickled.npy"):
        with pytest.raises(ValueError, match="load: .* not a"):
            pa.load(tmp_path / name)
    # a zip with a manifest whose tree is damaged
    with zipfile.ZipFile(tmp_path / "bad", "w") as z:
        with z.open("__manifest__.npy", "w") as fh:
            np.lib.format.write_array(
                fh, np.frombuffer(b'{"format": "parallel_autograd.save/1", "tree": {"t": 1}}',
                                  dtype=np.uint8))
    with pytest.raises(ValueError, match="damaged manifest"):
        pa.load(tmp_path / "bad")


# --- untrusted files: crafted or corrupted input gives one ValueError, bounded memory ---
#
# The helpers build files member by member (valid CRCs), so a test reaches the layer it
# means to test (zip directory, .npy header, manifest) instead of stopping at a CRC error.

_FMT = '{"format": "parallel_autograd.save/1", "tree": %s}'


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _raw_npy(header: bytes, data: bytes = b"") -> bytes:
    """A .npy member with this header text verbatim (version 1.0)."""
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


def _manifest(tree) -> bytes:
    text = tree if isinstance(tree, str) else json.dumps(tree)
    return _npy(np.frombuffer((_FMT % text).encode(), dtype=np.uint8))


def _zip(members: dict, method=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _file(tree, method=zipfile.ZIP_STORED, **arrays) -> bytes:
    members = {f"{k}.npy": v if isinstance(v, bytes) else _npy(v) for k, v in arrays.items()}
    members["__manifest__.npy"] = _manifest(tree)
    return _zip(members, method)


def _load_measured(data: bytes, **kw):
    """(result or the exception, tracemalloc peak in bytes) of pa.load(data)."""
    tracemalloc.start()
    try:
        got = pa.load(io.BytesIO(data), **kw)
    except Exception as e:  # noqa: BLE001 - the caller asserts which
        got = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return got, peak


def _arr(key="a0"):
    return {"t": "array", "a": key}


def test_an_array_named_twice_is_refused_not_copied_per_entry():
    """Issue 25 #6: 100 tensor entries naming one 1 MiB array took 101 MiB."""
    data = _file({"t": "list", "items": [{"t": "tensor", "a": "a0", "rg": False}] * 100},
                 a0=np.zeros(2**17))
    got, peak = _load_measured(data)
    assert isinstance(got, ValueError), got
    assert re.search(r"obj\[1\] names the array 'a0' that obj\[0\] already names", str(got))
    assert peak < 2 * len(data)
    # arrays too: sharing one ndarray between entries would alias them
    with pytest.raises(ValueError, match=r"obj\['y'\] names the array 'a0'"):
        pa.load(io.BytesIO(_file({"t": "dict", "items": [["x", _arr()], ["y", _arr()]]},
                                 a0=np.ones(3))))


def test_compressed_members_expand_only_up_to_max_bytes():
    """Issue 25 #6: a 0.12 MiB deflated file expanded to 128 MiB of zeros."""
    big = np.zeros(2**22)  # 32 MiB
    data = _file(_arr(), zipfile.ZIP_DEFLATED, a0=big)
    got, peak = _load_measured(data)
    assert isinstance(got, ValueError), got
    assert re.search(r"would take \d+ bytes once decompressed, more than the limit of "
                     rf"{len(data)} bytes \(by default the file's size", str(got))
    assert peak < 2 * len(data) + 2**20
    got, peak = _load_measured(data, max_bytes=2**20)
    assert isinstance(got, ValueError) and "max_bytes" in str(got)
    assert peak < 2**21
    got = pa.load(io.BytesIO(data), max_bytes=big.nbytes + 1000)  # allowed: loads
    assert got.shape == big.shape and not got.any()


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_only_the_compression_numpy_writes_is_read(method):
    data = _file(_arr(), method, a0=np.ones(3))
    got, peak = _load_measured(data, max_bytes=10**6)
    assert isinstance(got, ValueError), got
    assert re.search(rf"member a0.npy is compressed with zip method {method}; load reads "
                     "stored or deflated members", str(got))
    assert peak < 2**16  # no decompressor made (LZMA's allocates its declared dictionary)


def test_declared_sizes_are_checked_before_anything_is_allocated():
    """Issue 25 #10: a header declaring 8 TiB raised MemoryError (after trying)."""
    huge = _raw_npy(b"{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }"
                    b"          \n", b"\0" * 8)
    got, peak = _load_measured(_file(_arr(), a0=huge))
    assert isinstance(got, ValueError), got
    assert re.search(r"the array of obj \(member a0.npy\) declares shape \(1099511627776,\) "
                     r"of float64 \(8796093022208 bytes\) but holds 8 bytes", str(got))
    assert peak < 2**20
    # the zip directory's size is checked against max_bytes before the header is read
    members = {"a0.npy": _npy(np.zeros(1000)), "__manifest__.npy": _manifest(_arr())}
    with pytest.raises(ValueError, match="more than the limit of 100 bytes"):
        pa.load(io.BytesIO(_zip(members)), max_bytes=100)


def test_a_deeply_nested_manifest_is_refused_without_recursion():
    """Issue 25 #10: a manifest nested 600 deep raised RecursionError."""
    deep = '{"t": "list", "items": [' * 600 + '{"t": "value", "v": 1}' + "]}" * 600
    with pytest.raises(ValueError, match=r"nests 1202 levels deep.* at most 100 deep"):
        pa.load(io.BytesIO(_file(deep)))
    # save writes, and load reads, exactly MAX_DEPTH nested containers of any kind
    from parallel_autograd.serialization import MAX_DEPTH
    obj = 1.5
    for i in range(MAX_DEPTH):
        obj = ({"k": obj}, [obj], (obj,))[i % 3]
    buf = io.BytesIO()
    pa.save(obj, buf)
    buf.seek(0)
    assert pa.load(buf) == obj
    with pytest.raises(ValueError, match=r"save: obj\[0\].* nests containers more than 100"):
        pa.save([obj], io.BytesIO())
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contain itself"):
        pa.save(loop, io.BytesIO())
    # a manifest within the JSON depth bound but over MAX_DEPTH containers, no recursion
    deep = '{"t": "list", "items": [' * 101 + '{"t": "value", "v": 1}' + "]}" * 101
    with pytest.raises(ValueError, match=r"obj(\[0\]){100} nests containers more than 100"):
        pa.load(io.BytesIO(_file(deep)))


def test_corrupted_zip_flags_give_a_value_error():
    """Issue 25 #10: a flag bit set in the zip directory raised NotImplementedError."""
    buf = io.BytesIO()
    pa.save({"x": pa.tensor([1.0, 2.0])}, buf)
    data = bytearray(buf.getvalue())
    at = data.find(b"PK\x01\x02")  # the first central directory entry: a0.npy
    data[at + 8] |= 0x40  # "strong encryption"
    with pytest.raises(ValueError, match=r"the array of obj\['x'\] \(member a0.npy\) cannot be "
                                         r"read \(NotImplementedError: strong encryption"):
        pa.load(io.BytesIO(bytes(data)))
    data[at + 8] &= ~0x40
    data[at + 10] = 99  # an unknown compression method
    with pytest.raises(ValueError, match="member a0.npy is compressed with zip method 99"):
        pa.load(io.BytesIO(bytes(data)))


def test_a_header_numpy_cannot_tokenize_gives_a_value_error():
    """Issue 25 #10: an unterminated .npy header raised tokenize.TokenError."""
    bad = _raw_npy(b"{'descr': '<f8', 'fortran_order': False, 'shape': (1,\n")
    with pytest.raises(ValueError, match=r"member a0.npy\) cannot be read \(TokenError"):
        pa.load(io.BytesIO(_file(_arr(), a0=bad)))


_CRAFTED = {
    "unknown entry": ({"t": "pickle"}, {}, r"obj has an unknown entry type 'pickle'"),
    "tree not an entry": ([1], {}, r"obj is a JSON list, not an entry"),
    "value holding a list": ({"t": "value", "v": [1]}, {},
                             r"obj is a value entry holding list"),
    "items not a list": ({"t": "list", "items": 3}, {}, r"obj is a list entry without a list"),
    "bad dict pair": ({"t": "dict", "items": [[1, 2, 3]]}, {}, r"item 0 is not a \[key, value"),
    "bad dict key": ({"t": "dict", "items": [[[1], _arr()]]}, {}, r"has a key \[1\] of type list"),
    "key twice": ({"t": "dict", "items": [["k", {"t": "value", "v": 1}]] * 2}, {},
                  r"obj has the key 'k' twice"),
    "missing array": ({"t": "list", "items": [_arr("a7")]}, {},
                      r"obj\[0\] names the array 'a7', which the file does not hold"),
    "manifest as array": (_arr("__manifest__"), {}, "array entry without an array name"),
    "tensor without rg": ({"t": "tensor", "a": "a0"}, {"a0": np.ones(2)},
                          "tensor entry without a requires_grad flag"),
    "int tensor requiring grad": ({"t": "tensor", "a": "a0", "rg": True},
                                  {"a0": np.ones(2, np.int64)},
                                  r"a tensor that requires grad, but holds int64"),
    "scalar not 0-d": ({"t": "scalar", "a": "a0"}, {"a0": np.ones(3)},
                       r"is a scalar entry but has shape \(3,\)"),
    "object dtype": (_arr(), {"a0": _raw_npy(b"{'descr': '|O', 'fortran_order': False, "
                                             b"'shape': (1,), }\n", b"\0" * 8)},
                     "object array, which only unpickling could read"),
    "negative shape": (_arr(), {"a0": _raw_npy(b"{'descr': '<f8', 'fortran_order': False, "
                                               b"'shape': (-1, -8), }\n", b"\0" * 64)},
                       "negative dimension"),
    "zero-size items, 10**15 of them": (
        _arr(), {"a0": _raw_npy(b"{'descr': '|V0', 'fortran_order': False, "
                                b"'shape': (1000000000000000,), }\n")},
        r"would take 1000000000000\d+ bytes once decompressed"),
    "short data": (_arr(), {"a0": _npy(np.ones(4))[:-8]},
                   r"declares shape \(4,\) of float64 \(32 bytes\) but holds 24 bytes"),
    "manifest not uint8": (None, {"__manifest__": np.ones(3)}, "manifest is a float64 array"),
    "manifest a JSON list": (None, {"__manifest__": np.frombuffer(b"[1]", np.uint8)},
                             r"not a parallel_autograd save file \(its manifest is a list"),
    "manifest not utf-8": (None, {"__manifest__": np.frombuffer(b"\xff{", np.uint8)},
                           "its manifest is not JSON: UnicodeDecodeError"),
    "manifest without tree": (None, {"__manifest__": np.frombuffer(
        b'{"format": "parallel_autograd.save/1"}', np.uint8)}, "it has no tree"),
}


@pytest.mark.parametrize("case", list(_CRAFTED))
def test_crafted_manifests_and_members_are_refused_by_name(case):
    tree, arrays, message = _CRAFTED[case]
    if tree is None:  # the manifest itself is crafted
        data = _zip({f"{k}.npy": _npy(v) for k, v in arrays.items()})
    else:
        data = _file(tree, **arrays)
    got, peak = _load_measured(data)
    assert isinstance(got, ValueError) and re.search(message, str(got)), got
    assert str(got).startswith("load: the file ")
    assert peak < 64 * len(data) + 2**16


def test_zip_level_tricks_are_refused():
    # one member name twice in the zip directory (zipfile would read the last)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a0.npy", _npy(np.ones(2)))
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("a0.npy", _npy(np.ones(3)))
        z.writestr("__manifest__.npy", _manifest(_arr()))
    with pytest.raises(ValueError, match="it holds member a0.npy twice"):
        pa.load(io.BytesIO(buf.getvalue()))
    # two directory entries over the same stored bytes (a1's points at a0's data and CRC)
    one = _npy(np.zeros(2**15))
    data = bytearray(_zip({"a0.npy": one, "a1.npy": b"x" * len(one), "__manifest__.npy":
                           _manifest({"t": "list", "items": [_arr("a0"), _arr("a1")]})}))
    first = data.find(b"PK\x01\x02")
    second = data.find(b"PK\x01\x02", first + 1)
    data[second + 42:second + 46] = data[first + 42:first + 46]  # a1 points at a0's data
    data[second + 16:second + 20] = data[first + 16:first + 20]  # with a0's CRC
    got, _ = _load_measured(bytes(data))
    assert isinstance(got, ValueError) and "member a1.npy) cannot be read" in str(got), got


def test_max_bytes_must_be_a_size_and_paths_that_cannot_open_raise_as_open(tmp_path):
    buf = io.BytesIO()
    pa.save({"x": np.ones(4)}, buf)
    with pytest.raises(ValueError, match="max_bytes must be >= 0, got -1"):
        pa.load(io.BytesIO(buf.getvalue()), max_bytes=-1)
    for bad in (1.5, True, "10"):
        with pytest.raises(TypeError, match="max_bytes must be an int or None"):
            pa.load(io.BytesIO(buf.getvalue()), max_bytes=bad)
    assert pa.load(io.BytesIO(buf.getvalue()), max_bytes=10**6)["x"].shape == (4,)
    with pytest.raises(FileNotFoundError):  # as torch.load and open: not a bad file
        pa.load(tmp_path / "missing")


def test_awkward_keys_layouts_and_dtypes_round_trip_and_a_deflated_copy_loads():
    """What the checks must not refuse: brackets and quotes inside keys (the manifest's
    nesting is counted outside strings), Fortran order, structured and 0-size arrays,
    and a copy of the file deflated by hand (numpy's savez_compressed method)."""
    state = {"[" * 400 + '"{': np.asfortranarray(np.arange(6.0).reshape(2, 3)),
             "s": np.zeros(2, dtype=[("a", "<f4"), ("é", "<i2", (2,))]),
             "e": pa.tensor(np.zeros((0, 3)), requires_grad=True), 3: [(), {}, []]}
    buf = io.BytesIO()
    pa.save(state, buf)
    deflated = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, \
            zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    for data, kw in ((buf.getvalue(), {}), (deflated.getvalue(), {"max_bytes": 10**6})):
        got = pa.load(io.BytesIO(data), **kw)
        f = got["[" * 400 + '"{']
        assert f.flags.f_contiguous and np.array_equal(f, state["[" * 400 + '"{'])
        assert got["s"].dtype == state["s"].dtype
        assert got["e"].shape == (0, 3) and got["e"].requires_grad
        assert got[3] == [(), {}, []]
    with pytest.raises(ValueError, match="a compressed file needs a larger max_bytes"):
        pa.load(io.BytesIO(deflated.getvalue()))


@pytest.mark.timeout(60)
def test_the_nesting_count_is_linear_in_the_manifest_length():
    """A manifest of 1 MB of '"\\' (a string opened again and again, never closed): the
    nesting count before json.loads took quadratic time (a regex over the strings
    rescanned the rest of the text from each quote: 20 s for 32 KB, hours for 1 MB);
    now a linear scan, then json.loads refuses the text."""
    data = _file('"\\' * 500_000)
    got, peak = _load_measured(data)
    assert isinstance(got, ValueError) and "its manifest is not JSON" in str(got), got
    assert peak < 40 * len(data)


def test_a_file_object_that_cannot_seek_gives_a_value_error():
    class Pipe(io.RawIOBase):  # readable, not seekable (a pipe, a socket)
        def readable(self):
            return True

        def readinto(self, b):
            return 0

    with pytest.raises(ValueError, match="load needs a path or a seekable binary file"):
        pa.load(Pipe())

    class OldStyle(io.BytesIO):  # seek returns None, as some file wrappers' do
        def seek(self, *args):
            super().seek(*args)

    buf = OldStyle()
    pa.save({"x": np.ones(2)}, buf)
    buf.seek(0)
    assert pa.load(buf)["x"].tolist() == [1.0, 1.0]
