"""pa.save / pa.load: state dicts in .npz, never unpickled."""
from __future__ import annotations

import io
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
    assert np.array_equal(w.data, want["model"]["linear.weight"].data)
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
    assert np.array_equal(pa.load(buf)["x"].data, [1.0, 2.0])


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
