"""pa.save / pa.load in the safetensors format: bit-for-bit round trips of every dtype,
the file layout the format specifies (checked by a reader written here, as PyTorch has
none built in), state dicts moving to and from PyTorch modules, and clear errors.
(The reader is fuzzed in tests/test_serialization_fuzz.py.)"""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

import parallel_autograd as pa

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64,
          "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}


def _all_dtypes() -> dict:
    """One tensor per dtype, with the bit patterns a value comparison would miss (signed
    zeros, NaN payloads, infinities, extremes), and odd shapes (0-d, empty, Fortran)."""
    rng = np.random.default_rng(0)
    out = {}
    for name, d in DTYPES.items():
        if np.dtype(d).kind == "f":
            bits = rng.integers(0, 2**(8 * np.dtype(d).itemsize), 12, dtype=np.uint64)
            a = bits.astype(np.dtype(f"u{np.dtype(d).itemsize}")).view(d)  # any pattern
            a[:4] = [-0.0, np.inf, -np.inf, np.nan]
        elif d is np.bool_:
            a = rng.integers(0, 2, 12).astype(bool)
        else:
            info = np.iinfo(d)
            a = rng.integers(info.min, info.max, 12, dtype=d, endpoint=True)
            a[:2] = [info.min, info.max]
        out[f"t.{name}"] = pa.tensor(a.reshape(3, 4))
    out["scalar"] = pa.tensor(np.array(2.5))
    out["empty"] = pa.tensor(np.zeros((0, 3), np.float32))
    out["fortran"] = pa.tensor(np.asfortranarray(rng.standard_normal((3, 5))))
    out["bigendian"] = pa.tensor(np.arange(6, dtype=">i4").reshape(2, 3))
    return out


def _same_bits(want: np.ndarray, got: np.ndarray) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype.newbyteorder("=")
    assert np.ascontiguousarray(got).tobytes() == \
        np.ascontiguousarray(want, dtype=want.dtype.newbyteorder("=")).tobytes()


def read_by_hand(data: bytes) -> tuple:
    """(header, {name: ndarray}) parsed as the format's specification says, independent
    of the library: u64 LE header length, JSON header, data at the declared offsets."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    arrays = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dt = np.dtype(dict(zip(DTYPES, ["<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "i1",
                                        "<u8", "<u4", "<u2", "u1", "?"]))[e["dtype"]])
        arrays[name] = np.frombuffer(body[begin:end], dt).reshape(e["shape"])
    return header, arrays


def write_by_hand(arrays: dict) -> bytes:
    """A safetensors file as the specification describes it, written here."""
    names = {np.dtype(v): k for k, v in DTYPES.items()}
    header, chunks, at = {}, [], 0
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + b"".join(chunks)


def test_round_trip_every_dtype_bit_for_bit(tmp_path):
    sd = _all_dtypes()
    path = tmp_path / "all.safetensors"
    pa.save(sd, path)
    got = pa.load(path)
    assert list(got) == list(sd)
    for name, t in sd.items():
        assert isinstance(got[name], pa.Tensor) and got[name].is_leaf
        assert not got[name].requires_grad
        _same_bits(t.numpy(), got[name].numpy())
    buf = io.BytesIO()  # a file object: the format is named
    pa.save(sd, buf, format="safetensors")
    assert buf.getvalue() == path.read_bytes()
    buf.seek(0)
    again = pa.load(buf, format="safetensors", map_location="cpu")
    for name, t in sd.items():
        _same_bits(t.numpy(), again[name].numpy())


def test_file_layout_follows_the_specification(tmp_path):
    sd = _all_dtypes()
    path = tmp_path / "m.safetensors"
    pa.save(sd, path)
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    assert (8 + n) % 8 == 0 and data[8:9] == b"{"
    header, arrays = read_by_hand(data)
    assert list(arrays) == list(sd)
    ranges = sorted(e["data_offsets"] for k, e in header.items() if k != "__metadata__")
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous
    for name, t in sd.items():
        _same_bits(t.numpy(), arrays[name])


def test_the_extension_chooses_the_format(tmp_path):
    sd = {"w": pa.tensor(np.ones(2))}
    pa.save(sd, tmp_path / "a.safetensors")
    pa.save(sd, tmp_path / "a.pt")
    assert (tmp_path / "a.pt").read_bytes()[:4] == b"PK\x03\x04"  # .npz
    assert (tmp_path / "a.safetensors").read_bytes()[8:9] == b"{"
    pa.save(sd, tmp_path / "b.bin", format="safetensors")
    assert pa.load(tmp_path / "b.bin", format="safetensors")["w"].numpy().tolist() == [1, 1]
    with pytest.raises(ValueError, match="not a parallel_autograd save file"):
        pa.load(tmp_path / "b.bin")  # the extension says npz


def test_what_the_format_cannot_hold_is_refused_before_writing(tmp_path):
    path = tmp_path / "x.safetensors"
    cases = [({"opt": {"state": {}}}, "tensors only"), ({1: pa.tensor(1.0)}, "names are str"),
             ({"c": np.ones(2, np.complex64)}, "complex64"), ([pa.tensor(1.0)], "dict"),
             ({"__metadata__": np.ones(1)}, "reserved")]
    for obj, words in cases:
        with pytest.raises(TypeError, match=words):
            pa.save(obj, path)
        assert not path.exists() or path.stat().st_size == 0
    with pytest.raises(ValueError, match="format must be"):
        pa.save({}, path, format="pickle")


def test_map_location_accepted_for_cpu_only(tmp_path):
    path = tmp_path / "m.npz"
    pa.save({"w": pa.tensor(np.ones(2))}, path)
    for where in (None, "cpu"):
        assert pa.load(path, where)["w"].numpy().tolist() == [1, 1]
        assert pa.load(path, map_location=where)["w"].numpy().tolist() == [1, 1]
    # a dict mapping to the CPU is fine; a non-CPU target fails as torch.load does
    # without that device (RuntimeError: pa.DeviceUnavailableError), before reading
    assert pa.load(path, map_location={"cuda:0": "cpu"})["w"].numpy().tolist() == [1, 1]
    with pytest.raises(RuntimeError):
        pa.load(path, map_location="cuda:0")


def test_bfloat16_is_read_widened_exactly():
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], "<u2")  # 1, -2, inf, tiny subnormal
    text = json.dumps({"b": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    data = len(text).to_bytes(8, "little") + text + bits.tobytes()
    got = pa.load(io.BytesIO(data), format="safetensors")["b"].numpy()
    assert got.dtype == np.float32
    assert got.view(np.uint32).tolist() == [int(b) << 16 for b in bits]


def _models(torch):
    ours = pa.nn.Sequential(pa.nn.Linear(4, 8), pa.nn.BatchNorm1d(8), pa.nn.ReLU(),
                            pa.nn.Linear(8, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                 torch.nn.ReLU(), torch.nn.Linear(8, 3)).double()
    return ours, theirs


def test_state_dict_saved_here_loads_into_torch(tmp_path):
    torch = pytest.importorskip("torch")
    ours, theirs = _models(torch)
    ours(pa.randn(5, 4))  # BatchNorm's running statistics and counter move off their init
    path = tmp_path / "ours.safetensors"
    pa.save(ours.state_dict(), path)
    _, arrays = read_by_hand(path.read_bytes())
    theirs.load_state_dict({k: torch.from_numpy(a.copy()) for k, a in arrays.items()},
                           strict=True)
    want = ours.state_dict()
    for k, v in theirs.state_dict().items():
        _same_bits(want[k].numpy(), v.numpy())
    x = np.random.default_rng(1).standard_normal((5, 4))
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(ours(pa.tensor(x)).numpy(),
                               theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    try:
        from safetensors.numpy import load_file  # optional: the reference reader
    except ImportError:
        return
    for k, a in load_file(str(path)).items():
        _same_bits(want[k].numpy(), a)


def test_torch_state_dict_written_in_the_format_loads_here(tmp_path):
    torch = pytest.importorskip("torch")
    ours, theirs = _models(torch)
    theirs.train()
    theirs(torch.randn(5, 4, dtype=torch.float64))
    sd = {k: v.numpy() for k, v in theirs.state_dict().items()}
    path = tmp_path / "theirs.safetensors"
    path.write_bytes(write_by_hand(sd))
    ours.load_state_dict(pa.load(path))
    for k, v in ours.state_dict().items():
        _same_bits(sd[k], v.numpy())
