"""Tests of the benchmark (`python -m stress.compare`), on tiny sizes.

No timing thresholds: what is checked is what the benchmark derives from its own
samples (medians, speedups, efficiency, the bound, the targets), that the report shows
the numbers it was given, that the workloads compute what PyTorch computes, and that
the children it starts find `stress` although it is not installed.
"""
import json
import os
import platform
import statistics
import subprocess
import sys

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd.allocator import tune_allocator
from parallel_autograd.engine.accumulate import backward_order
from parallel_autograd.engine.cost import gil_enabled
from parallel_autograd.engine.plan import plan_call
from stress import compare
from stress.compare import bound, children, cli, measure, report, synthetic, targets, workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--size", "tiny", "--retries", "0"]


def plan_nodes(loss) -> int:
    return len(plan_call(loss, retain_graph=True).nodes)


# ---- measurement -------------------------------------------------------------------------
def test_forced_parallel_run_reports_parallel_and_its_own_speedup():
    # 4 branches of 6 elementwise ops on 40,000 elements: no node is cheap and the work
    # is wide, so the default engine runs it in parallel at 2 workers (at 1: sequential).
    w = workloads.Workload("wide-test", "test", {"tiny": dict(n=40_000, branches=4)},
                           synthetic.wide_ew_data, synthetic.wide_ew)
    args = cli.parse_args(TINY + ["--reps", "3", "--no-torch"])
    r = measure.measure_workload(w, args, workers=[1, 2], cores=2, torch=None)
    assert r["decision"]["par2"]["mode"] == "parallel"
    assert r["decision"]["par2"]["reason"].startswith("width ")
    assert r["decision"]["par1"] == {"mode": "sequential", "reason": "num_workers=1"}
    assert r["timeline"]["mode"] == "parallel"
    for c, ts in r["times"].items():
        assert len(ts) == 3
        assert r["median"][c] == statistics.median(ts)
        assert r["min"][c] == min(ts)
    for c in ("par1", "par2"):
        assert r["speedup"][c] == statistics.median(r["times"]["seq"]) / \
            statistics.median(r["times"][c])
    assert set(r["speedup"]) == set(r["times"]) - {"seq"}
    assert r["nodes"] == r["bound"]["nodes"] == plan_nodes(w.build(w.data(0, "tiny"))[0])
    assert r["efficiency"] == r["bound"]["bound"] / r["median"]["par2"]
    assert set(r["peak_bytes"]) == {"seq", "par2"}


def test_configs_follow_workers_torch_and_the_gil():
    shared = [] if gil_enabled() else ["shared"]  # the share_cheap engine: no GIL only
    assert measure.configs([1, 2, 4], None) == ["seq", "par1", "par2", "par4"] + shared
    assert measure.configs([1, 2], object()) == ["seq", "par1", "par2"] + shared + ["torch"]


# ---- targets -----------------------------------------------------------------------------
def wl(seq=1.0, par=1.0, speedup=1.0, torch=None, nodes=10, torch_nodes=10, width=1.0,
       eff=1.0, peak=(100, 100)):
    med = {"seq": seq, "par2": par, **({} if torch is None else {"torch": torch})}
    return {"median": med, "speedup": {"par2": speedup}, "nodes": nodes,
            "torch_nodes": torch_nodes, "bound": {"width": width}, "efficiency": eff,
            "peak_bytes": {"seq": peak[0], "par2": peak[1]}}


def status(tid, setting="default", ft=False, **wls):
    raw = {"cores": 2, "setting": setting, "workloads": wls}
    ts = targets.evaluate_ft_targets(raw, "FT") if ft else targets.evaluate_targets(raw)
    return next(t for t in ts if t["id"] == tid)["status"]


def test_target_1_no_slowdown_boundary():
    assert status(1, a=wl(par=1.03), b=wl(par=0.5)) == "PASS"  # 1.03 / 1.0: at the limit
    assert status(1, a=wl(par=1.031), b=wl(par=0.5)) == "MISS"
    t = targets.evaluate_targets({"cores": 2, "setting": "default", "workloads": {
        "a": wl(par=1.2), "b": wl(par=0.9), "c": wl(par=1.1)}})[0]
    assert t["detail"] == "worst a 1.200; over: a 1.200, c 1.100"


@pytest.mark.parametrize("setting,ok,miss", [("default", 1.25, 1.2499), ("tuned", 1.5, 1.4999)])
def test_target_2_wide_elementwise_speedup_per_setting(setting, ok, miss):
    assert status(2, setting, **{"wide-elementwise": wl(speedup=ok)}) == "PASS"
    assert status(2, setting, **{"wide-elementwise": wl(speedup=miss)}) == "MISS"
    assert status(2, setting, cnn=wl()) == "n/a"


def test_target_3_faster_than_torch_is_strict():
    fast = {"wide-matmul": wl(par=0.99, torch=1.0), "attention": wl(par=0.5, torch=1.0)}
    assert status(3, **fast) == "PASS"
    assert status(3, **fast, **{"mlp-chain": wl(par=1.0, torch=1.0)}) == "MISS"  # equal
    assert status(3, **{"wide-matmul": wl(par=0.5)}) == "n/a"  # torch not run
    assert status(3, cnn=wl(par=0.5, torch=1.0)) == "n/a"  # none of the three selected


def test_target_4_time_per_node():
    tiny = "tiny-nodes"
    assert status(4, **{tiny: wl(seq=2.0, nodes=100, torch=1.0, torch_nodes=50)}) == "PASS"
    assert status(4, **{tiny: wl(seq=2.0, nodes=99, torch=1.0, torch_nodes=50)}) == "MISS"
    assert status(4, **{tiny: wl(seq=2.0)}) == "n/a"


def test_target_5_efficiency_where_wide():
    assert status(5, a=wl(width=2, eff=0.85), b=wl(width=1.99, eff=0.1)) == "PASS"
    assert status(5, a=wl(width=2, eff=0.8499)) == "MISS"
    assert status(5, a=wl(width=1.99, eff=0.1)) == "n/a"


def test_target_6_peak_memory():
    assert status(6, a=wl(peak=(200, 300)), b=wl(peak=(0, 1))) == "PASS"  # 1.5x; 0 -> 1
    assert status(6, a=wl(peak=(200, 301))) == "MISS"


def test_free_threaded_targets():
    tiny = "tiny-nodes"
    assert status("a", ft=True, **{tiny: wl(speedup=1.4)}) == "PASS"
    assert status("a", ft=True, **{tiny: wl(speedup=1.39)}) == "MISS"
    assert status("a", ft=True, cnn=wl()) == "n/a"
    assert status("b", ft=True, cnn=wl(par=1.03)) == "PASS"
    assert status("b", ft=True, cnn=wl(par=1.04)) == "MISS"
    t = targets.evaluate_ft_targets({"cores": 2, "workloads": {"cnn": wl()}}, "FT")[1]
    assert t["target"] == "FT parallel / FT sequential <= 1.03 on every workload"


# ---- report ------------------------------------------------------------------------------
ENV = {"python": "3.11.7", "executable": "/x/python", "numpy": "2.4.6", "torch": None,
       "blas": [{"internal_api": "openblas", "version": "0.3.31", "num_threads": 2}],
       "free_threaded_build": False, "gil_enabled": True}


def measured(seq, par, speedup, decision, contention, torch=None, shared=None):
    med = {"seq": seq, "par1": seq, "par2": par, "par4": par * 0.8}
    med.update({} if torch is None else {"torch": torch})
    med.update({} if shared is None else {"shared": shared})
    return {"nodes": 97, "bound": {"width": 15.3, "bound": 0.0058}, "median": med,
            "speedup": {"par1": 1.0, "par2": speedup, "par4": speedup * 1.25,
                        **({} if shared is None else {"shared": seq / shared})},
            "efficiency": 1.0545, "peak_bytes": {"seq": 3 * 2**20, "par2": 2**19},
            "decision": {"par2": decision}, "contention": contention, "faults": {"par2": 98}}


def setting(env=ENV, tuned=None, **wls):
    return {"cores": 2, "workers": [1, 2, 4], "size": "quick", "reps": 3, "env": env,
            "tune_allocator": tuned, "workloads": wls}


BLAS = {"mode": "sequential", "reason": "BLAS-bound (99% of the work is in BLAS)"}
WIDE = {"mode": "parallel", "reason": "width 6.71"}


def test_report_shows_the_numbers_it_was_given():
    mm = measured(0.011, 0.0055, 2.0, BLAS, None, torch=0.015)
    ew = measured(0.0107, 0.0057, 1.89, WIDE, 0.25)  # not measured with torch
    raws = {"default": setting(mm=mm, ew=ew), "tuned": setting(
        tuned=True, mm=ew, ew=measured(0.011, 0.0055, 2.0, BLAS, None))}
    ts = [targets.target(1, "a target", True, "its detail"), targets.target(2, "t", None, "-")]
    text = report.report({"meta": {"date": "D", "command": "python -m stress.compare -q"},
                          "settings": raws, "targets": {"default": ts, "tuned": ts[:1]}})
    lines = text.splitlines()
    assert lines[0] == "# Backward pass: parallel vs sequential engine (D)"
    assert lines[2] == ("`python -m stress.compare -q`: 2 usable cores, Python 3.11.7, numpy "
                        "2.4.6, BLAS openblas 0.3.31 (2 threads), no torch; sizes quick, "
                        "median of 3 after a warm-up.")
    assert "| workload | nodes | width | seq ms | par 1w ms | par 2w (all) ms | par 4w ms |" \
        in text
    assert ("| mm | 97 | 15.3 | 11.0 | 11.0 (1.00x) | 5.5 (2.00x) | 4.4 (2.50x) | 0.500 | 5.8 "
            "| 1.05 | 15.0 | 3.0 | 0.500 | sequential: BLAS-bound | n/a |") in lines
    assert ("| ew | 97 | 15.3 | 10.7 | 10.7 (1.00x) | 5.7 (1.89x) | 4.6 (2.36x) | 0.533 | 5.8 "
            "| 1.05 | n/a | 3.0 | 0.500 | parallel (width 6.71) | 0.25 |") in lines
    tuned = lines[lines.index("## Allocator: tuned (tune_allocator() -> True)") + 2]
    assert "torch ms" in lines[lines.index("## Allocator: default") + 2]
    assert "torch ms" not in tuned
    assert lines.count("- PASS 1. a target: its detail") == 2
    assert "- n/a  2. t: -" in lines
    assert "| mm | 11.0 | 5.5 | 2.00x | 98 | 10.7 | 5.7 | 1.89x | 98 |" in lines
    assert "| ew | 10.7 | 5.7 | 1.89x | 98 | 11.0 | 5.5 | 2.00x | 98 |" in lines


def test_side_by_side_report_shows_both_interpreters():
    ft_env = dict(ENV, executable="/ft/python", free_threaded_build=True)  # GIL came back
    a = dict(setting(mm=measured(0.011, 0.0055, 2.0, BLAS, None)),
             numpy_runs=[{"64": 0.5, "2048": 0.7}])
    b = dict(setting(env=ft_env, mm=measured(0.008, 0.002, 4.0, WIDE, 0.25, shared=0.004)),
             numpy_runs=[{"64": 1.5, "2048": 1.9}, {"64": 1.7, "2048": 2.1}])
    ts = [targets.target(1, "t", True, "d")]
    interp = {"gil": {"label": "GIL", "settings": {"default": a}, "targets": {"default": ts}},
              "ft": {"label": "FT", "settings": {"default": b}, "targets": {"default": ts}}}
    text = report.report_pythons({"meta": {"date": "D", "command": "c"}, "interpreters": interp,
                                  "ft_targets": {"default": [targets.target("a", "x", False,
                                                                            "1.05x")]}})
    lines = text.splitlines()
    assert ("| mm | 97 | 11.0 | 5.5 | 2.00x | 8.0 | 2.0 | 4.00x | 4.0 (2.00x) | parallel "
            "(width 6.71) | 0.36 | n/a / 0.25 |") in lines
    assert "- FT: `/ft/python`: Python 3.11.7 (free-threaded build, GIL enabled), numpy " \
        "2.4.6, BLAS openblas 0.3.31 (2 threads), no torch" in lines
    assert any(line.startswith("note: the GIL was enabled in the FT runs") for line in lines)
    assert any(line.startswith("- FT: numpy alone, 2 threads vs 1") and
               line.endswith("64 elements 1.60x, 2,048 elements 2.00x (median of 2 "
                             "measurements, one per workload run)") for line in lines)
    assert "Targets (FT interpreter, free-threaded CPython):" in lines
    assert "- MISS a. x: 1.05x" in lines
    assert "## FT detail: allocator default" in lines


# ---- the bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("exp_full,critical", [(2.0, 47.0), (16.0, 51.0)])
def test_bound_of_a_chain_and_a_fork_with_known_costs(exp_full, critical):
    # loss = sum(tanh(sin(x)) + exp(x)): sum -> add -> (tanh -> sin | exp) -> x's sink
    x = pa.tensor(np.ones(10), requires_grad=True)
    order = backward_order(plan_call((pa.tanh(pa.sin(x)) + pa.exp(x)).sum(),
                                     retain_graph=True).nodes)
    one = {"sum": 1.0, "add": 2.0, "tanh": 4.0, "sin": 8.0, "exp": 16.0, "AccumulateGrad": 32.0}
    full = dict(one, tanh=5.0, exp=exp_full)  # each node counts at its faster time
    by_name = {n.name: n for n in order}
    assert set(by_name) == set(one)
    s = bound.summarize(order, {by_name[k]: v for k, v in one.items()},
                        {by_name[k]: v for k, v in full.items()}, cores=2)
    # critical: sum + add + max(tanh + sin, exp) + sink, each at min(one, full)
    assert s["critical"] == 1 + 2 + max(4 + 8, min(16, exp_full)) + 32 == critical
    assert s["total"] == 63 and s["total_blas"] == sum(full.values())
    assert s["bound"] == max(63 / 2, critical) and s["width"] == 63 / critical
    assert list(s["by_op"]) == ["AccumulateGrad", "exp", "sin", "tanh", "add", "sum"]
    chain = bound.summarize(order[3:], {n: 1.0 for n in order[3:]}, {}, cores=4)
    assert chain["critical"] == 0  # no time with BLAS as configured: min(one, 0)


def test_profile_graph_walks_every_node_and_frees_the_graph():
    x = pa.tensor(np.ones(50_000), requires_grad=True)
    loss = pa.stack([pa.sin(x * float(i)) for i in range(1, 5)]).sum()
    n = plan_nodes(loss)
    prof = bound.profile_graph(loss, cores=2, repeats=1)
    assert prof["nodes"] == n
    assert prof["by_op"]["sin"]["count"] == 4 and prof["by_op"]["mul"]["count"] == 4
    assert prof["bound"] == max(prof["total"] / 2, prof["critical"])
    assert 0 < prof["critical"] <= prof["total"]
    assert x.grad is None  # profiling commits nothing
    with pytest.raises(RuntimeError, match="second time"):
        pa.backward(loss)  # ... and frees the saved values like a non-retaining backward


# ---- workloads ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_workload_matches_torch(name):
    pytest.importorskip("torch")
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


def test_workloads_are_seeded():
    loss1, leaves = workloads.build("wide-matmul", seed=1, size="tiny")
    loss2, _ = workloads.build("wide-matmul", seed=1, size="tiny")
    loss3, _ = workloads.build("wide-matmul", seed=2, size="tiny")
    assert loss1.data == loss2.data != loss3.data
    assert all(t.requires_grad for t in leaves)
    with pytest.raises(ValueError):
        workloads.WORKLOADS["cnn"].data(0, "huge")


# ---- command line and children -----------------------------------------------------------
def test_options_and_their_defaults():
    a = cli.parse_args(["--quick"])
    assert (a.reps, a.retries, a.size, a.allocator, a.timeline) == \
        (3, 0, "quick", "both", "wide-elementwise")
    a = cli.parse_args(["--workloads", "cnn, lstm", "--python", sys.executable])
    assert (a.workloads, a.timeline, a.allocator, a.reps, a.retries, a.size) == \
        (["cnn", "lstm"], "cnn", "default", 7, 1, "full")
    assert a.python_path == os.path.abspath(sys.executable)
    for bad in (["--workloads", "nope"], ["--reps", "0"]):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(bad)
        assert exc.value.code == 2


def test_children_get_the_measurement_options_and_the_repository(monkeypatch):
    argv = ["--quick", "--out", "x.json", "--plot=y.png", "--reps", "5", "--workloads", "a,b",
            "--python", "ft", "--timeline=cnn", "--allocator", "tuned", "--seed", "3"]
    assert children.passed_on(argv) == ["--quick", "--reps", "5", "--seed", "3"]
    assert children.ROOT == ROOT
    for k, v in dict(MALLOC_TRIM_THRESHOLD_="1", PYTHON_GIL="0", PYTHONPATH="/x").items():
        monkeypatch.setenv(k, v)
    env = children.child_env(other_python=False)
    assert "MALLOC_TRIM_THRESHOLD_" not in env and env["PYTHON_GIL"] == "0"
    assert env["PYTHONPATH"] == ROOT + os.pathsep + "/x"
    assert "PYTHON_GIL" not in children.child_env(other_python=True)
    monkeypatch.delenv("PYTHONPATH")
    assert children.child_env(other_python=True)["PYTHONPATH"] == ROOT


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


def check_measurements(raw, text=None):
    """What a setting's raw measurements must satisfy, from its own samples."""
    cores = raw["cores"]
    par = f"par{cores}"
    assert raw["workers"] == sorted({1, 2, cores, 2 * cores})
    for name, r in raw["workloads"].items():
        for c, ts in r["times"].items():
            assert len(ts) == raw["reps"] and r["median"][c] == statistics.median(ts)
        assert r["speedup"][par] == r["median"]["seq"] / r["median"][par]
        assert r["efficiency"] == r["bound"]["bound"] / r["median"][par]
        w = workloads.WORKLOADS[name]
        assert r["nodes"] == plan_nodes(w.build(w.data(raw["seed"], raw["size"]))[0])
        if text is not None:
            row = f"| {name} | {r['nodes']} | {r['bound']['width']:.1f} | " \
                  f"{report.ms(r['median']['seq'])} | "
            assert row in text


def test_every_workload_from_the_command_line(tmp_path):
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "stress.compare", *TINY, "--reps", "2",
                           "--allocator", "default", "--out", str(out), "--plot",
                           str(tmp_path / "r.png")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    raw = result["settings"]["default"]
    assert list(raw["workloads"]) == list(workloads.WORKLOADS)
    check_measurements(raw, proc.stdout)
    assert result["targets"]["default"] == targets.evaluate_targets(raw)
    for t in result["targets"]["default"]:
        assert f"- {t['status']:4s} {t['id']}. {t['target']}: {t['detail']}" in proc.stdout
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "--plot needs matplotlib" in proc.stderr
        assert not (tmp_path / "r.png").exists()
    else:
        assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def run_main(argv, tmp_path, monkeypatch, capsys):
    """main() in this process from another directory and without PYTHONPATH: the
    children it starts must find `stress` on their own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "r.json"
    assert compare.main(TINY + ["--reps", "1", "--no-torch", "--out", str(out), *argv]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_both_allocator_settings_in_children(tmp_path, monkeypatch, capsys):
    result, text = run_main(["--workloads", "wide-elementwise,tiny-nodes"], tmp_path,
                            monkeypatch, capsys)
    assert list(result["settings"]) == ["default", "tuned"]
    assert result["settings"]["default"]["tune_allocator"] is None
    assert isinstance(result["settings"]["tuned"]["tune_allocator"], bool)
    for s, raw in result["settings"].items():
        check_measurements(raw)
        assert result["targets"][s] == targets.evaluate_targets(raw)
    assert "## Allocator settings side by side" in text
    assert "wide-elementwise speedup >= 1.5x (tuned allocator)" in text


def test_second_interpreter_side_by_side(tmp_path, monkeypatch, capsys):
    # --python with a path: this interpreter again stands in for the free-threaded one
    # (same code path as --python ft, labelled this/other instead of GIL/FT).
    names = ["tiny-nodes", "wide-elementwise"]
    result, text = run_main(["--python", sys.executable, "--workloads", ",".join(names)],
                            tmp_path, monkeypatch, capsys)
    this, other = result["interpreters"].values()
    assert (this["label"], other["label"]) == ("this", "other")
    for i in (this, other):
        raw = i["settings"]["default"]
        assert list(i["settings"]) == ["default"] and list(raw["workloads"]) == names
        assert raw["env"]["executable"] == sys.executable
        check_measurements(raw)
        assert i["targets"]["default"] == targets.evaluate_targets(raw)
    assert result["ft_targets"]["default"] == \
        targets.evaluate_ft_targets(other["settings"]["default"], "other")
    a, b = this["settings"]["default"], other["settings"]["default"]
    par = f"par{a['cores']}"
    lines = text.splitlines()
    at = lines.index("## this vs other (allocator: default)") + 2
    head = lines[at].split(" | ")
    col = head.index("other par / this par")
    for n, row in zip(names, lines[at + 2:at + 4]):
        cells = row.split(" | ")
        ra, rb = a["workloads"][n], b["workloads"][n]
        assert cells[0] == f"| {n}" and cells[head.index("this seq ms")] == \
            report.ms(ra["median"]["seq"])
        assert cells[col] == f"{rb['median'][par] / ra['median'][par]:.2f}"


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
