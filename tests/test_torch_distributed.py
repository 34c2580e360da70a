"""torch.distributed's entry points on pa.distributed (issue 27): init_process_group and
friends, checked before MPI starts in this process (it never starts here) and under a real
`mpiexec` launch (tests/mpi_torch_names.py)."""
from __future__ import annotations

import json

import pytest

import parallel_autograd.distributed as dist
from mpi_launch import needs_mpi, run


@pytest.mark.parametrize("backend,exc,match", [
    ("nccl", RuntimeError, "NCCL built in"),
    ("cuda:nccl", RuntimeError, "NCCL built in"),
    ("foo", ValueError, "unsupported backend"),
    ("cpu:foo", ValueError, "unsupported backend"),
    (3, TypeError, "backend must be"),
])
def test_bad_backends_are_refused_before_mpi_starts(backend, exc, match):
    with pytest.raises(exc, match=match):
        dist.init_process_group(backend)
    assert not dist.is_initialized()


def test_other_arguments_checked_before_mpi_starts():
    with pytest.raises(AssertionError, match="CUDA"):
        dist.init_process_group("gloo", device_id="cuda:0")
    with pytest.raises(TypeError, match="world_size"):
        dist.init_process_group("gloo", world_size=2.0)
    assert not dist.is_initialized()


def test_queries_before_init_raise_torchs_type():
    for fn in (dist.get_rank, dist.get_world_size, dist.get_backend, dist.barrier):
        with pytest.raises(ValueError, match="not initialized"):
            fn()
        with pytest.raises(RuntimeError, match="not initialized"):
            fn()
    assert dist.is_nccl_available() is False
    assert dist.is_mpi_available() == dist.is_available() == dist.is_gloo_available()


def _json_objects(text: str) -> list:
    """Every JSON object printed in `text`: the ranks share mpiexec's stdout, and under load
    one rank's line can arrive glued to another's (seen once: two objects on one line)."""
    dec, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        obj, end = dec.raw_decode(text, i)
        out.append(obj)
        i = text.find("{", end)
    return out


@needs_mpi
@pytest.mark.parametrize("n", [1, 2])
def test_torch_style_script_under_mpiexec(n):
    proc = run(n, "tests/mpi_torch_names.py", deadline=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    reports = sorted(_json_objects(proc.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(n))
    total = float(sum(range(1, n + 1)))
    for r in reports:
        assert r["world"] == r["group_world"] == n and r["group_rank"] == r["rank"]
        assert r["sum"] == [total] * 3 and r["bcast"] == [0.0] and r["backend"] == "mpi"
        assert r["initialized"] and r["after_group_destroy"] and not r["after_destroy"]
        assert r["reinit"] and "world_size=" in r["bad_world"] and not r["after_bad"]
