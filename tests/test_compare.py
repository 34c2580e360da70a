"""Smoke tests of the benchmark (`python -m stress.compare`) on tiny sizes.

No timing assertions: these check that it runs, that the table and the JSON carry
every column, that the workloads compute what PyTorch computes, and the allocator
opt-in and the bound's arithmetic.
"""
import importlib.util
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.allocator import tune_allocator
from stress import compare
from stress.compare import bound, workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
COLUMNS = ["workload", "nodes", "width", "seq ms", "par 1w ms", "par/seq", "bound ms", "eff",
           "peak seq MiB", "peak par MiB", "decision (all cores)", "other load"]
PER_WORKLOAD = ["nodes", "median", "speedup", "bound", "efficiency", "peak_bytes", "decision",
                "faults", "contention", "stats", "timeline"]


def run_compare(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "stress.compare", "--size", "tiny",
                           "--reps", "1", "--retries", "0", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_workload_table_json_and_plot(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = ["--allocator", "default", "--out", str(out)]
    if HAVE_MPL:
        args += ["--plot", str(png)]
    text = run_compare(*args)
    header = next(line for line in text.splitlines() if line.startswith("| workload"))
    for col in COLUMNS + (["torch ms"] if HAVE_TORCH else []):
        assert f" {col} |" in header, col
    result = json.loads(out.read_text())
    raw = result["settings"]["default"]
    cores = raw["cores"]
    assert raw["workers"] == sorted({1, 2, cores, 2 * cores})
    assert list(raw["workloads"]) == list(workloads.WORKLOADS)
    for name, r in raw["workloads"].items():
        assert f"| {name} |" in text
        for key in PER_WORKLOAD:
            assert key in r, (name, key)
        configs = ["seq"] + [f"par{n}" for n in raw["workers"]] + (["torch"] if HAVE_TORCH
                                                                    else [])
        if not raw["env"]["gil_enabled"]:  # the opt-in share_cheap engine, no GIL only
            configs.append("shared")
            assert r["speedup"]["shared"] > 0
        assert set(r["median"]) == set(configs)
        assert all(t > 0 for t in r["median"].values())
        assert set(r["peak_bytes"]) == {"seq", f"par{cores}"}
        assert r["decision"][f"par{cores}"]["mode"] in ("parallel", "sequential")
        assert r["bound"]["bound"] >= r["bound"]["critical"] > 0
    targets = result["targets"]["default"]
    assert [t["id"] for t in targets] == [1, 2, 3, 4, 5, 6]
    assert all(t["status"] in ("PASS", "MISS", "n/a") for t in targets)
    for t in targets:
        assert f"{t['status']:4s} {t['id']}." in text
    if HAVE_MPL:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_both_allocator_settings_side_by_side(tmp_path):
    out = tmp_path / "r.json"
    text = run_compare("--workloads", "wide-elementwise,tiny-nodes", "--no-torch",
                       "--out", str(out))
    assert "## Allocator settings side by side" in text
    result = json.loads(out.read_text())
    assert set(result["settings"]) == {"default", "tuned"}
    assert result["settings"]["default"]["tune_allocator"] is None
    assert isinstance(result["settings"]["tuned"]["tune_allocator"], bool)
    assert "wide-elementwise speedup >= 1.5x" in text


def test_second_interpreter_side_by_side(tmp_path):
    # --python with a path: this interpreter again stands in for the free-threaded one
    # (same code path as --python ft, labelled this/other instead of GIL/FT).
    out = tmp_path / "r.json"
    names = ["tiny-nodes", "wide-elementwise"]
    text = run_compare("--python", sys.executable, "--workloads", ",".join(names),
                       "--no-torch", "--out", str(out))
    lines = text.splitlines()
    assert "## this vs other (allocator: default)" in lines
    assert not any("tuned" in line for line in lines if line.startswith("#"))
    table = lines.index("## this vs other (allocator: default)") + 2
    header = lines[table]
    for col in ["workload", "nodes", "this seq ms", "this par ms", "this speedup",
                "other seq ms", "other par ms", "other speedup", "other decision",
                "other par / this par"]:
        assert f" {col} |" in header, col
    assert [line.split(" | ")[0] for line in lines[table + 2:table + 4]] == \
        [f"| {n}" for n in names]
    for label in ("this", "other"):
        env_line = next(line for line in lines if line.startswith(f"- {label}: `"))
        assert sys.executable in env_line and "GIL " in env_line
        assert f"## {label} detail: allocator default" in lines
    assert "a. tiny-nodes: other parallel speedup over other sequential " \
        ">= 1.4x: " in text
    assert "b. other parallel / other sequential <= 1.03 on every workload: worst " in text
    result = json.loads(out.read_text())
    assert list(result["interpreters"]) == ["this", "other"]
    for i in result["interpreters"].values():
        raw = i["settings"]["default"]
        assert list(i["settings"]) == ["default"]
        assert list(raw["workloads"]) == names
        assert raw["env"]["executable"] == sys.executable
        assert isinstance(raw["env"]["gil_enabled"], bool)
        assert [t["id"] for t in i["targets"]["default"]] == [1, 2, 3, 4, 5, 6]
        for r in raw["workloads"].values():
            assert all(t > 0 for t in r["median"].values())
    targets = result["ft_targets"]["default"]
    assert [t["id"] for t in targets] == ["a", "b"]
    assert all(t["status"] in ("PASS", "MISS") for t in targets)
    for t in targets:
        assert f"{t['status']:4s} {t['id']}. {t['target']}: {t['detail']}" in text


def test_python_ft_needs_the_free_threaded_build(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("FT_CACHE", raising=False)
    assert compare.ft_python() == os.path.join(ROOT, ".cache", "freethreaded", "venv", "bin",
                                               "python")
    missing = tmp_path / "no-ft-here"
    monkeypatch.setenv("FT_CACHE", str(missing))  # what the Makefile exports
    with pytest.raises(SystemExit) as exc:
        compare.main(["--python", "ft", "--size", "tiny", "--reps", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"no free-threaded interpreter at {missing}" in err
    assert "make freethreaded" in err
    with pytest.raises(SystemExit):
        compare.main(["--python", str(missing / "python")])
    assert "not an executable interpreter" in capsys.readouterr().err


def test_bad_workload_is_rejected():
    proc = subprocess.run([sys.executable, "-m", "stress.compare", "--workloads", "nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown workload" in proc.stderr


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_workload_matches_torch(name):
    w = workloads.WORKLOADS[name]
    data = w.data(3, "tiny")
    loss, leaves = w.build(data)
    pa.backward(loss)
    tloss, tleaves = w.build_torch(data)
    tloss.backward()
    np.testing.assert_allclose(loss.data, tloss.detach().numpy(), rtol=1e-10)
    assert len(leaves) == len(tleaves)
    for a, b in zip(leaves, tleaves):
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_workload_shortcuts_and_seeds():
    loss1, leaves = workloads.build("wide-matmul", seed=1, size="tiny")
    loss2, _ = workloads.build("wide-matmul", seed=1, size="tiny")
    loss3, _ = workloads.build("wide-matmul", seed=2, size="tiny")
    assert loss1.data == loss2.data != loss3.data
    assert all(t.requires_grad for t in leaves)
    with pytest.raises(ValueError):
        workloads.WORKLOADS["cnn"].data(0, "huge")


def test_bound_of_a_chain_and_of_branches():
    x = pa.tensor(np.ones(50_000), requires_grad=True)
    chain = x
    for _ in range(4):
        chain = pa.sin(chain)
    prof = bound.profile_graph(chain.sum(), cores=2, repeats=5)
    # a chain: the critical path is all of the work (each node at its faster timing)
    assert 0.5 * prof["total"] <= prof["critical"] <= prof["total"]
    branches = [pa.sin(x * float(i)) for i in range(1, 5)]
    prof = bound.profile_graph(pa.stack(branches).sum(), cores=2, repeats=1)
    assert prof["width"] > 1.5
    assert prof["bound"] == max(prof["total"] / 2, prof["critical"])
    assert prof["by_op"]["sin"]["count"] == 4
    assert x.grad is None  # profiling commits nothing


def test_tune_allocator_is_opt_in_and_validates():
    # In a child process: the tuning is process-wide and must not leak into the test run.
    code = ("from parallel_autograd.allocator import tune_allocator, glibc_version; "
            "print(tune_allocator(), glibc_version() is not None)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    ok, glibc = proc.stdout.split()
    assert ok == glibc  # True on glibc, False (nothing changed) elsewhere
    assert (glibc == "True") == (platform.libc_ver()[0] == "glibc")
    with pytest.raises(TypeError):
        tune_allocator(mmap_threshold=1.5)
    with pytest.raises(ValueError):
        tune_allocator(trim_threshold=-1)
