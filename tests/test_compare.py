"""Tests of the benchmark (`python -m stress.compare`), on tiny sizes.

No timing thresholds: what is checked is what the benchmark derives from its own
samples (medians, speedups, intervals, efficiency, the bound, the targets and their
PASS / MISS / unresolved decisions), that the report shows the numbers it was given,
that the workloads compute what PyTorch computes, and that the children it starts
find `stress` although it is not installed.
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
from stress.compare import (alloc_scaling, bound, children, cli, measure, report,
                            report_pythons, samples, schedule, stats, step, synthetic,
                            targets, verdict, workloads)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--size", "tiny", "--retries", "0", "--budget", "0"]
FULL = ["--report", "-", "--no-plot"]  # the full tables on stdout (after the verdict), no PNG


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
        assert len(ts) == len(r["forward"][c]) == len(r["step"][c]) == r["rounds"] == 3
        assert r["median"][c] == statistics.median(ts)
        assert r["min"][c] == min(ts)
        assert r["median_step"][c] == statistics.median(r["step"][c])
        # the step is zero_grad + forward + backward, timed around all of them
        assert all(s >= f + b for s, f, b in zip(r["step"][c], r["forward"][c], ts))
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


def test_a_session_keeps_its_leaves_and_steps_like_a_training_loop(monkeypatch):
    monkeypatch.setitem(step.OPTIMIZERS, "parallel_autograd", None)  # gradients comparable
    w = workloads.WORKLOADS["mlp-chain"]
    data = w.data(0, "tiny")
    s = step.Session(w, data)
    leaves = list(s.leaves)
    assert len(leaves) == len(w.build(data)[1])
    out = step.timed_step(s, step.backward_call("seq", None))
    first = [t.grad.clone() for t in leaves]
    out2 = step.timed_step(s, step.backward_call("par2", None))
    assert s.leaves == leaves  # the same tensors: a step records, it copies no parameter
    for t, g in zip(leaves, first):  # zero_grad: the second step does not accumulate
        np.testing.assert_array_equal(t.grad, g)
    assert out["stats"] is None and out2["stats"].mode in ("parallel", "sequential")


def test_a_training_step_includes_the_optimizer_step_in_place():
    w = workloads.WORKLOADS["mlp-chain"]
    data = w.data(0, "tiny")
    s = step.Session(w, data)
    assert s.optimizer_step is not None  # Adam, as in the torch column
    leaves = list(s.leaves)
    arrays = [t.numpy() for t in leaves]
    before = [a.copy() for a in arrays]
    step.timed_step(s, step.backward_call("seq", None))
    assert s.leaves == leaves and all(t.numpy() is a for t, a in zip(leaves, arrays))
    assert any(not np.array_equal(a, b) for a, b in zip(arrays, before))  # updated in place


# ---- statistics --------------------------------------------------------------------------
def test_bootstrap_interval_covers_a_known_ratio():
    # 200 data sets of 15 rounds: ours = 2 x theirs, each with 10% noise; the 95%
    # interval of the ratio of medians must contain 2 in nearly every one of them.
    rng = np.random.default_rng(1)
    hits = 0
    for i in range(200):
        num = 2.0 * (1 + 0.1 * rng.standard_normal(15))
        den = 1.0 * (1 + 0.1 * rng.standard_normal(15))
        iv = stats.ratio_interval(num, den, seed=i, paired=False)
        assert iv.lo <= iv.point <= iv.hi and iv.hi - iv.lo > 0.01
        hits += iv.contains(2.0)
    assert hits >= 180


def test_constant_ratio_has_a_zero_width_interval_and_pairing_cancels_drift():
    assert stats.ratio_interval([2.0] * 7, [1.0] * 7, 0, True) == stats.Interval(2, 2, 2)
    drift = np.array([1.0, 3.0, 1.5, 5.0, 2.0, 1.2, 4.0])  # a whole round slower or faster
    paired = stats.ratio_interval(1.1 * drift, drift, 0, paired=True)
    assert paired.lo == pytest.approx(1.1) and paired.hi == pytest.approx(1.1)
    assert stats.ratio_interval(1.1 * drift, drift, 0, paired=False).hi > 1.5


def test_bootstrap_is_seeded():
    a, b = [1.0, 1.2, 0.9, 1.4, 1.1], [1.0, 0.8, 1.3, 0.9, 1.05]
    assert stats.ratio_interval(a, b, 7, False) == stats.ratio_interval(a, b, 7, False)
    assert stats.seed_for(0, "cnn", "step") == stats.seed_for(0, "cnn", "step") != \
        stats.seed_for(1, "cnn", "step")
    with pytest.raises(ValueError):
        stats.boot_medians({"a": [1.0, 2.0], "b": [1.0]}, 0)


@pytest.mark.parametrize("op,limit,lo,hi,expected", [
    ("<", 1.0, 0.8, 0.99, "PASS"), ("<", 1.0, 0.9, 1.0, "unresolved"),
    ("<", 1.0, 1.0, 1.0, "MISS"), ("<", 1.0, 1.01, 1.2, "MISS"),
    ("<=", 1.03, 1.0, 1.03, "PASS"), ("<=", 1.03, 1.02, 1.04, "unresolved"),
    ("<=", 1.03, 1.031, 1.1, "MISS"), (">=", 0.9, 0.9, 1.2, "PASS"),
    (">=", 0.9, 0.85, 0.95, "unresolved"), (">=", 0.9, 0.5, 0.899, "MISS")])
def test_decision_from_the_interval(op, limit, lo, hi, expected):
    assert stats.decide(stats.Interval((lo + hi) / 2, lo, hi), op, limit) == expected


# ---- targets -----------------------------------------------------------------------------
def series(med, n=7, spread=0.0):
    """n samples with median `med`, spread evenly by +-spread (relative)."""
    return list(med * (1 + spread * np.linspace(-1, 1, n)))


def row(seq=1.0, par=None, torch=None, spread=0.0, contention=0.0, mode="sequential",
        bound_=0.5, nodes=10, peak=(100, 100), n=7):
    par = seq if par is None else par
    meds = {"seq": seq, "par1": seq, "par2": par, "par4": par,
            **({} if torch is None else {"torch": torch})}
    # parallel rounds in the reverse order: paired ratios vary from round to round
    ts = {c: series(m, n, spread)[::-1 if c.startswith("par") else 1] for c, m in meds.items()}
    r = {"times": ts, "forward": {c: series(m / 2, n, spread) for c, m in meds.items()},
         "step": {c: series(m * 1.5, n, spread) for c, m in meds.items()},
         "fault_samples": {c: [0] * n for c in meds}, "stats": {}, "contention": contention,
         "decision": {"par2": {"mode": mode, "reason": "width 3.00" if mode == "parallel"
                               else "BLAS-bound (99%)"}},
         "nodes": nodes, "bound": {"bound": bound_, "width": 2.5,
                                   "by_op": {"AccumulateGrad": {"count": 2}}},
         "peak_bytes": {"seq": peak[0], "par2": peak[1]}, "batches": []}
    return samples.summarize(r, 2)


def torch_row(bwd=1.0, spread=0.0, contention=0.0, n=7, gap=None, gap_load=0.0):
    r = samples.summarize({"times": {"torch": series(bwd, n, spread)},
                           "forward": {"torch": series(bwd / 2, n, spread)},
                           "step": {"torch": series(bwd * 1.5, n, spread)},
                           "fault_samples": {"torch": [0] * n}, "contention": contention,
                           "stats": {}, "decision": {}, "torch_nodes": 10}, 2)
    if gap is not None:  # numpy / torch on one thread
        r["kernel_gap"] = {"kernels": ["sin", "cos"], "n": 10, "calls": 1, "samples": {
            "numpy": series(gap), "torch1": series(1.0), "torchN": series(0.5)},
            "contention": gap_load}
    return r


ENV = {"python": "3.11.7", "executable": "/x/python", "numpy": "2.4.6", "torch": None,
       "torch_threads": None, "free_threaded_build": False, "gil_enabled": True,
       "blas": [{"internal_api": "openblas", "version": "0.3.31", "num_threads": 2}]}


def raw(setting="default", env=ENV, **rows):
    return {"setting": setting, "cores": 2, "workers": [1, 2, 4], "seed": 0, "size": "quick",
            "reps": 7, "noisy_limit": 0.25, "env": env, "workloads": rows,
            "tune_allocator": None if setting == "default" else True}


def status(tid, wls, torch=None, tuned=None, setting="default"):
    ts = targets.evaluate_targets(raw(setting, **wls), torch and raw("torch", **torch),
                                  tuned and raw("tuned", **tuned))
    return next(t for t in ts if t["id"] == tid)


def test_faster_than_torch_pass_miss_unresolved_and_noisy_rows():
    def t3(par, torch=1.0, spread=0.0, contention=0.0):
        return status(3, {"cnn": row(par=par, spread=spread, contention=contention)},
                      {"cnn": torch_row(torch, spread)})
    assert t3(0.5)["status"] == "PASS"
    assert t3(1.5)["status"] == "MISS" and t3(1.0)["status"] == "MISS"  # equal: not faster
    t = t3(0.98, spread=0.2)
    assert t["status"] == "unresolved" and t["recheck"] == ["cnn"]
    t = t3(0.5, contention=1.0)  # measured under other load: shown, not scored
    assert t["status"] == "unresolved" and t["checks"][0]["status"] == "noisy"
    assert "not scored" in t["detail"] and t["recheck"] == ["cnn"]
    both = status(3, {"cnn": row(par=1.5), "lstm": row(par=0.98, spread=0.2)},
                  {"cnn": torch_row(), "lstm": torch_row(spread=0.2)})
    assert both["status"] == "MISS" and both["recheck"] == []  # decided: nothing to measure
    assert status(3, {"wide-elementwise": row(par=9.0)}, {"wide-elementwise": torch_row()}
                  )["status"] == "n/a"  # the one workload it excludes
    assert status(3, {"cnn": row(par=0.5)})["status"] == "n/a"  # no PyTorch child


def test_training_step_faster_on_at_least_five_of_eight():
    names = list(workloads.MODEL_WORKLOADS)  # the real programs have targets 10-12
    torch = {n: torch_row(1.0, spread=0.2) for n in names}

    def t5(fast, unresolved=0, noisy=0):
        kinds = ["fast"] * fast + ["unresolved"] * unresolved + ["noisy"] * noisy
        kinds += ["slow"] * (len(names) - len(kinds))
        par = {"fast": 0.3, "slow": 3.0, "unresolved": 1.0, "noisy": 0.3}
        return status(5, {n: row(par=par[k], spread=0.2, contention=1.0 if k == "noisy"
                                 else 0.0) for n, k in zip(names, kinds)}, torch)
    assert t5(5)["status"] == "PASS"
    assert t5(4)["status"] == "MISS"
    assert t5(4, unresolved=1)["status"] == "unresolved"
    assert t5(4, noisy=1)["status"] == "unresolved"  # a noisy row might still make it
    assert t5(3, unresolved=1)["status"] == "MISS"
    assert t5(8)["detail"].startswith("8 of 8 PASS, need 5")
    assert status(5, {"cnn": row(par=0.3)}, {"cnn": torch_row()})["status"] == "n/a"


def test_real_program_targets_from_step_intervals():
    f32 = [n for n in workloads.PROGRAM_WORKLOADS if n.endswith("f32")]
    f64 = [n for n in workloads.PROGRAM_WORKLOADS if n.endswith("f64")]

    def run(r32, r64, spread=0.0, names=None):
        wls = {n: row(r, r, spread=spread) for n, r in zip(f32 + f64, r32 + r64)}
        wls = {n: r for n, r in wls.items() if names is None or n in names}
        ts = targets.evaluate_targets(raw(**wls), raw("torch", **{
            n: torch_row(1.0, spread) for n in wls}))
        return {t["id"]: t for t in ts}
    t = run([0.9, 0.9, 0.9, 1.0, 1.1, 1.14], [0.9] * 6)  # step ratio = par / torch
    assert [t[i]["status"] for i in (10, 11, 12)] == ["PASS", "PASS", "PASS"]
    assert t[10]["detail"].startswith("4 of 6 PASS, need 4")
    assert t[5]["status"] == t[3]["status"] == "n/a"  # the first eight: none run
    t = run([0.9, 0.9, 0.9, 1.1, 1.1, 1.2], [0.9] * 5 + [1.0])
    assert [t[i]["status"] for i in (10, 11, 12)] == ["MISS", "MISS", "MISS"]
    assert "dcgan-f32 1.20x [1.20, 1.20] MISS" in t[11]["detail"]
    assert "dcgan-f64 1.00x [1.00, 1.00] MISS" in t[12]["detail"]  # equal: not faster
    t = run([1.0] * 6, [1.0] * 6, spread=0.2)
    assert [t[i]["status"] for i in (10, 11, 12)] == ["unresolved", "unresolved", "unresolved"]
    assert set(t[10]["recheck"]) == set(f32) and set(t[12]["recheck"]) == set(f64)
    t = run([0.5] * 6, [0.5] * 6, names=f32[:3])  # "4 of the 6" needs all six
    assert t[10]["status"] == "n/a" and t[11]["status"] == "PASS" and t[12]["status"] == "n/a"
    assert verdict.workload_verdict("dcgan-f32", list(run(
        [0.9] * 5 + [1.2], [0.9] * 6).values())) == ("MISS", [10, 11])


def test_wide_elementwise_gap_against_numpys_kernel_gap():
    wide = "wide-elementwise"

    def t4(par, gap):
        return status(4, {wide: row(par=par)}, {wide: torch_row(1.0, gap=gap)})["status"]
    assert t4(2.0, 3.0) == "PASS" and t4(3.0, 3.0) == "PASS" and t4(2.0, 1.5) == "MISS"
    noisy_gap = status(4, {wide: row(par=2.0)}, {wide: torch_row(1.0, gap=3.0, gap_load=1.0)})
    assert noisy_gap["checks"][0]["status"] == "noisy" and noisy_gap["status"] == "unresolved"
    assert status(4, {wide: row(par=2.0)}, {wide: torch_row()})["status"] == "n/a"


def test_engine_targets_from_intervals():
    assert status(1, {"a": row(1.0, 1.03), "b": row(1.0, 0.5)})["status"] == "PASS"
    assert status(1, {"a": row(1.0, 1.031)})["status"] == "MISS"
    assert status(1, {"a": row(1.0, 1.03, spread=0.1)})["status"] == "unresolved"
    wide = "wide-elementwise"
    assert status(2, {wide: row(1.25, 1.0)})["status"] == "PASS"
    assert status(2, {wide: row(1.49, 1.0)}, setting="tuned")["status"] == "MISS"
    assert status(6, {"a": row(par=1.05)}, tuned={"a": row(par=1.0)})["status"] == "PASS"
    assert status(6, {"a": row(par=1.2)}, tuned={"a": row(par=1.0)})["status"] == "MISS"
    assert status(6, {"a": row()})["status"] == "n/a"
    assert status(7, {"a": row(par=1.0, bound_=0.9, mode="parallel"),
                      "b": row(bound_=0.1)})["status"] == "PASS"  # b runs sequentially
    assert status(7, {"a": row(par=1.0, bound_=0.8, mode="parallel")})["status"] == "MISS"
    assert status(7, {"a": row(bound_=0.1)})["status"] == "n/a"
    tiny = status(8, {"tiny-nodes": row(40e-6, nodes=8)}, {"tiny-nodes": torch_row()})
    assert tiny["status"] == "PASS"
    assert "forward recording 3.3 us [3.3, 3.3] per op (6 ops)" in tiny["detail"]
    assert status(8, {"tiny-nodes": row(41e-6, nodes=8)})["status"] == "MISS"
    assert status(9, {"a": row(peak=(200, 300)), "b": row(peak=(0, 1))})["status"] == "PASS"
    assert status(9, {"a": row(peak=(200, 301))})["status"] == "MISS"


def test_free_threaded_targets():
    ft = {n: targets.evaluate_ft_targets(raw(**{n: r}), "FT") for n, r in
          (("tiny-nodes", row(1.4, 1.0)), ("cnn", row(1.0, 1.04)))}
    assert targets.statuses(ft["tiny-nodes"]) == ["PASS", "PASS"]
    assert targets.statuses(ft["cnn"]) == ["n/a", "MISS"]
    assert ft["cnn"][1]["target"] == \
        "FT parallel / FT sequential backward <= 1.03 on every workload"


# ---- report ------------------------------------------------------------------------------
BLAS = {"mode": "sequential", "reason": "BLAS-bound (99% of the work is in BLAS)"}
WIDE = {"mode": "parallel", "reason": "width 6.71"}


def test_report_shows_the_numbers_it_was_given():
    mm = row(0.011, 0.0055, torch=0.02)
    ew = dict(row(0.0107, 0.0057, contention=0.3), decision={"par2": WIDE})  # noisy
    settings = {"default": raw(mm=mm, ew=ew),
                "tuned": raw("tuned", mm=row(0.0107, 0.0057), ew=row(0.011))}
    torch = raw("torch", mm=torch_row(0.015), ew=torch_row(0.01))
    ts = [targets.target(1, "a target", True, "its detail"), targets.target(2, "t", None, "-")]
    text = report.report({"meta": {"date": "D", "command": "python -m stress.compare -q"},
                          "settings": settings, "torch_child": torch,
                          "targets": {"default": ts, "tuned": ts[:1]}})
    lines = text.splitlines()
    assert lines[0] == "# Forward, backward and training step: parallel_autograd against " \
        "PyTorch (D)"
    assert lines[2].startswith("`python -m stress.compare -q`: 2 usable cores, Python 3.11.7, "
                               "numpy 2.4.6, BLAS openblas 0.3.31 (2 threads), no torch; sizes "
                               "quick, medians of 7 rounds after a warm-up")
    assert "| workload | nodes | width | seq ms | par 1w ms | par 2w (all) ms | par 4w ms |" \
        in text
    assert ("| mm | 10 | 2.5 | 11.0 | 11.0 (1.00x [1.00, 1.00]) | 5.5 (2.00x [2.00, 2.00]) | "
            "5.5 (2.00x [2.00, 2.00]) | 0.500 [0.500, 0.500] | 500.0 | 90.91 [90.91, 90.91] | "
            "15.0 | 0.000 | 0.000 | sequential: BLAS-bound | 0.00 |") in lines
    assert any(line.startswith("| ew (noisy) | 10 |") and "parallel (width 6.71)" in line
               for line in lines)
    # forward, backward and step against the PyTorch child: 5.5 / 15 = 0.37
    assert ("| mm | 7 / 7 | 2.8 | 7.5 | 0.37x [0.37, 0.37] | 5.5 | 15.0 | 0.37x [0.37, 0.37] "
            "| 16.5 | 8.2 | 22.5 | 0.37x [0.37, 0.37] | 0.00 / 0.00 |") in lines
    assert lines.count("- PASS 1. a target: its detail") == 2
    assert "- n/a  2. t: -" in lines
    assert "| mm | 11.0 | 5.5 | 2.00x [2.00, 2.00] | 0 | 10.7 | 5.7 | 1.88x [1.88, 1.88] | 0 " \
        "| 0.96x [0.96, 0.96] |" in lines
    # torch in the default setting's process (20 ms) against its own (15 ms)
    assert "| mm | 20.0 | 15.0 | 1.33x [1.33, 1.33] | 1.33x [1.33, 1.33] | 1.33x [1.33, 1.33] " \
        "| no |" in lines
    assert "numpy's per-element kernel gap: not measured (wide-elementwise not run)." in lines


def test_side_by_side_report_shows_both_interpreters():
    ft_env = dict(ENV, executable="/ft/python", free_threaded_build=True)  # GIL came back
    a = dict(raw(mm=row(0.011, 0.0055, mode="sequential")),
             numpy_runs=[{"64": 0.5, "2048": 0.7}])
    b_row = row(0.008, 0.002, contention=0.25)
    b_row["times"]["shared"] = series(0.004)
    b = dict(raw(env=ft_env, mm=samples.summarize(b_row, 2)),
             numpy_runs=[{"64": 1.5, "2048": 1.9}, {"64": 1.7, "2048": 2.1}])
    ts = [targets.target(1, "t", True, "d")]
    interp = {"gil": {"label": "GIL", "settings": {"default": a}, "targets": {"default": ts}},
              "ft": {"label": "FT", "settings": {"default": b}, "targets": {"default": ts}}}
    ft_targets = {"default": [targets.target("a", "x", False, "1.05x")]}
    text = report_pythons.report_pythons({"meta": {"date": "D", "command": "c"},
                                          "interpreters": interp, "ft_targets": ft_targets})
    lines = text.splitlines()
    assert ("| mm | 10 | 11.0 | 5.5 | 2.00x [2.00, 2.00] | 8.0 | 2.0 | 4.00x [4.00, 4.00] | "
            "4.0 (2.00x [2.00, 2.00]) | sequential: BLAS-bound | 0.36x [0.36, 0.36] | "
            "0.00 / 0.25 |") in lines
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
F32_TOL = {"rtol": 1e-4, "atol": 1e-6}  # float32 programs: float32 rounding, not 1e-10


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_workload_matches_torch(name):
    pytest.importorskip("torch")
    w = workloads.WORKLOADS[name]
    data = w.data(3, "tiny")
    loss, leaves = w.build(data)
    pa.backward(loss)
    tloss, tleaves = w.build_torch(data)
    tloss.backward()
    f32 = w.dtype == "f32"
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(),
                               **(F32_TOL if f32 else {"rtol": 1e-10}))
    assert len(leaves) == len(tleaves)
    for a, b in zip(leaves, tleaves):
        assert a.grad.dtype == b.grad.numpy().dtype == (np.float32 if f32 else np.float64)
        np.testing.assert_allclose(a.grad, b.grad.numpy(),
                                   **(F32_TOL if f32 else {"rtol": 1e-8, "atol": 1e-12}))


def test_the_real_programs_are_six_in_both_dtypes():
    names = workloads.PROGRAM_WORKLOADS
    assert names == tuple(f"{p}-{dt}" for p in ("gpt", "mnist-cnn", "lstm-lm", "gru-lm",
                                                 "transformer-lm", "dcgan")
                          for dt in ("f32", "f64"))
    assert len(workloads.MODEL_WORKLOADS) == 8 and not set(names) & set(workloads.MODEL_WORKLOADS)
    for n in names:  # sizes a step of ~5-50 ms at full size, smaller ones for --quick
        assert set(workloads.WORKLOADS[n].dims) == set(workloads.SIZES)


@pytest.mark.parametrize("name", [n for n in workloads.PROGRAM_WORKLOADS if n.endswith("f64")])
def test_a_real_program_steps_alike_in_both_libraries_from_the_same_weights(name):
    # Sessions as the benchmark makes them (each library's model built once, weights set by
    # name), one training step each (Adam included): the same weights before and after,
    # and the next loss within 1e-10.
    pytest.importorskip("torch")
    w = workloads.WORKLOADS[name]
    data = w.data(0, "tiny")
    ours, theirs = step.Session(w, data), step.Session(w, data, torch=True)
    assert len(ours.leaves) == len(theirs.leaves)
    for a, b in zip(ours.leaves, theirs.leaves):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
        assert a.dtype == np.float64
    step.timed_step(ours, step.backward_call("par2", None))
    step.timed_step(theirs, step.backward_call("torch", None))
    for a, b in zip(ours.leaves, theirs.leaves):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9,
                                   atol=1e-12)
    lo, lt = ours.forward(), theirs.forward()
    assert abs(float(lo.item()) - float(lt.item())) <= 1e-10


def test_a_real_program_keeps_its_dtype_whatever_the_default(monkeypatch):
    # the workload sets float32 / float64 itself: the library default does not leak in
    for default in (np.float32, np.float64):
        pa.set_default_dtype(default)
        try:
            for name in ("gpt-f32", "dcgan-f64"):
                w = workloads.WORKLOADS[name]
                s = step.Session(w, w.data(0, "tiny"))
                want = np.float32 if name.endswith("f32") else np.float64
                assert s.forward().dtype == want
                assert all(t.dtype == want for t in s.leaves)
        finally:
            pa.set_default_dtype(np.float64)


def test_workloads_are_seeded():
    loss1, leaves = workloads.build("wide-matmul", seed=1, size="tiny")
    loss2, _ = workloads.build("wide-matmul", seed=1, size="tiny")
    loss3, _ = workloads.build("wide-matmul", seed=2, size="tiny")
    assert loss1.numpy() == loss2.numpy() != loss3.numpy()
    assert all(t.requires_grad for t in leaves)
    with pytest.raises(ValueError):
        workloads.WORKLOADS["cnn"].data(0, "huge")


# ---- command line and children -----------------------------------------------------------
def test_options_and_their_defaults():
    a = cli.parse_args(["--quick"])
    assert (a.reps, a.retries, a.size, a.allocator, a.timeline, a.budget, a.check) == \
        (3, 0, "quick", "both", "wide-elementwise", 20.0, False)
    a = cli.parse_args(["--workloads", "cnn, lstm", "--python", sys.executable])
    assert (a.workloads, a.timeline, a.allocator, a.reps, a.retries, a.size, a.budget) == \
        (["cnn", "lstm"], "cnn", "default", 7, 1, "full", 120.0)
    assert cli.parse_args(["--workloads", "programs,cnn,gpt-f32"]).workloads == \
        list(workloads.PROGRAM_WORKLOADS) + ["cnn"]  # a group, then names, no repeats
    assert cli.parse_args(["--workloads", "models"]).workloads == \
        list(workloads.MODEL_WORKLOADS)
    assert cli.parse_args(["--size", "tiny", "--budget", "5"]).budget == 5.0
    assert cli.parse_args(["--size", "tiny"]).budget == 0.0
    assert a.python_path == os.path.abspath(sys.executable)
    for bad in (["--workloads", "nope"], ["--reps", "0"]):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(bad)
        assert exc.value.code == 2


def test_children_get_the_measurement_options_and_the_repository(monkeypatch):
    argv = ["--quick", "--out", "x.json", "--plot=y.png", "--reps", "5", "--workloads", "a,b",
            "--python", "ft", "--timeline=cnn", "--allocator", "tuned", "--seed", "3",
            "--check", "--budget", "9"]
    assert children.passed_on(argv) == ["--quick", "--seed", "3"]  # --reps: per child
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
            assert len(r["forward"][c]) == len(r["step"][c]) == raw["reps"]
        assert r["speedup"][par] == r["median"]["seq"] / r["median"][par]
        assert r["efficiency"] == r["bound"]["bound"] / r["median"][par]
        w = workloads.WORKLOADS[name]
        assert r["nodes"] == plan_nodes(w.build(w.data(raw["seed"], raw["size"]))[0])
        if text is not None:
            row = f" | {r['nodes']} | {r['bound']['width']:.1f} | " \
                  f"{report.ms(r['median']['seq'])} | "
            assert f"| {name}{row}" in text or f"| {name} (noisy){row}" in text


@pytest.mark.timeout(600)  # a deadlock guard: the benchmark's children under load
def test_every_workload_from_the_command_line(tmp_path):
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "stress.compare", *TINY, "--reps", "2",
                           "--allocator", "default", "--no-torch", "--out", str(out), "--plot",
                           str(tmp_path / "r.png"), "--report", "-"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    raw = result["settings"]["default"]
    assert list(raw["workloads"]) == list(workloads.WORKLOADS)
    check_measurements(raw, proc.stdout)
    assert result["torch_child"] is None
    assert result["targets"] == targets.evaluate_all(result["settings"])  # from the JSON alone
    check_alloc_scaling(raw, proc.stdout)
    # the rows outside the workload table ran too, ours alone under --no-torch in the
    # competing-load row, their targets recomputable from the JSON
    assert list(result["loaded"]) == ["pa", "pa-nospin"]
    assert "torch" not in result["scientific"]["libs"]
    assert result["extra_targets"] == cli.extra_targets(result, 0.25)
    for head in ("## Float64 scientific work", "## A training step beside a competing load"):
        assert head in proc.stdout
    for t in result["targets"]["default"]:
        assert f"- {t['status']:4s} {t['id']}. {t['target']}: {t['detail']}" in proc.stdout
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert proc.stderr.count("no plot: matplotlib is not installed") == 1
        assert not (tmp_path / "r.png").exists()
    else:
        assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_alloc_scaling(raw, text):
    """The caching allocator's row (issue 25): every operation at every live count with
    the cache on and off, and the report's table made from the JSON alone."""
    m = raw["workloads"][alloc_scaling.WORKLOAD]["alloc_scaling"]
    assert m["live"] == list(alloc_scaling.LIVE["tiny"])
    for op in alloc_scaling.OPERATIONS:
        for n in m["live"]:
            s = m["samples"][op][str(n)]
            assert len(s["on"]) == len(s["off"]) == raw["reps"]
            assert all(t > 0 for t in s["on"] + s["off"])
            assert f"| {op} | {n:,} | " in text
    assert "\n".join(alloc_scaling.section(raw)) in text


def test_alloc_scaling_table_shows_cache_on_off_and_growth_with_intervals():
    def pair(on, off):
        return {"on": series(on * 1e-6), "off": series(off * 1e-6)}

    m = {"live": [1000, 4000], "elems": 8192, "contention": 0.1,
         "ops_per_sample": {"replace": 1000, "chain step": 40},
         "samples": {"replace": {"1000": pair(2.0, 1.0), "4000": pair(8.0, 1.0)},
                     "chain step": {"1000": pair(500.0, 500.0), "4000": pair(500.0, 500.0)}}}
    lines = alloc_scaling.section(raw(**{"mlp-chain": dict(row(), alloc_scaling=m)}))
    text = "\n".join(lines)
    assert lines[0] == "## The caching allocator against the blocks in use"
    assert "| replace | 1,000 | 2.0 | 1.0 | 2.00x [2.00, 2.00] |  |  |" in text
    assert ("| replace | 4,000 | 8.0 | 1.0 | 8.00x [8.00, 8.00] | 4.00x [4.00, 4.00] | "
            "1.00x [1.00, 1.00] |") in text
    assert "| chain step | 4,000 | 500.0 | 500.0 | 1.00x [1.00, 1.00] | 1.00x" in text
    assert "Other load meanwhile 0.10 cores" in text
    assert alloc_scaling.section(raw(**{"cnn": row()})) == []  # not measured: no section
    skipped = dict(row(), alloc_scaling={"skipped": "the caching allocator is off"})
    assert "Not measured: the caching allocator is off." in \
        alloc_scaling.section(raw(**{"mlp-chain": skipped}))


def run_main(argv, tmp_path, monkeypatch, capsys):
    """main() in this process from another directory and without PYTHONPATH: the
    children it starts must find `stress` on their own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "r.json"
    assert compare.main(TINY + FULL + ["--reps", "1", "--no-torch", "--out", str(out),
                                       *argv]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_both_allocator_settings_in_children(tmp_path, monkeypatch, capsys):
    result, text = run_main(["--workloads", "wide-elementwise,tiny-nodes"], tmp_path,
                            monkeypatch, capsys)
    assert list(result["settings"]) == ["default", "tuned"]
    assert result["settings"]["default"]["tune_allocator"] is None
    assert isinstance(result["settings"]["tuned"]["tune_allocator"], bool)
    for raw in result["settings"].values():
        check_measurements(raw)
    assert result["targets"] == targets.evaluate_all(result["settings"])
    assert targets.statuses(result["targets"]["tuned"])[5] == "n/a"  # allocator: in default
    assert result["targets"]["default"][5]["checks"]  # scored against the tuned setting
    assert "## Allocator settings side by side" in text
    assert "wide-elementwise backward speedup >= 1.5x (tuned allocator)" in text


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
        assert cells[0] in (f"| {n}", f"| {n} (noisy)")
        assert cells[head.index("this seq ms")] == report.ms(ra["median"]["seq"])
        assert cells[col].startswith(f"{rb['median'][par] / ra['median'][par]:.2f}x [")


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


# ---- more rounds, --check, the PyTorch child ----------------------------------------------
def test_batches_merge_and_noisy_ones_are_replaced_or_dropped():
    first = row(1.0, n=3, contention=0.1)
    first["batches"] = [{"rounds": 3, "contention": 0.1}]
    quiet = dict(row(2.0, n=3, contention=0.2), batches=[{"rounds": 3, "contention": 0.2}])
    r = samples.merge_batch(first, quiet, 0.25, 2)
    assert r["rounds"] == 6 and r["times"]["seq"] == [1.0] * 3 + [2.0] * 3
    assert r["contention"] == 0.2 and r["median"]["seq"] == 1.5
    noisy = dict(row(9.0, n=3, contention=1.0), batches=[{"rounds": 3, "contention": 1.0}])
    r = samples.merge_batch(r, noisy, 0.25, 2)  # dropped: the row has quiet rounds
    assert r["rounds"] == 6 and r["batches"][-1]["dropped"]
    was_noisy = dict(row(9.0, n=3, contention=1.0), batches=[{"rounds": 3, "contention": 1.0}])
    r = samples.merge_batch(was_noisy, quiet, 0.25, 2)  # a quiet batch replaces noisy rounds
    assert r["times"]["seq"] == [2.0] * 3 and r["contention"] == 0.2
    gaps = [torch_row(gap=g, gap_load=load) for g, load in ((3.0, 1.0), (2.0, 0.1), (9.0, 0.5))]
    for g in gaps:
        g["batches"] = [{"rounds": 7, "contention": 0.0}]
    r = samples.merge_batch(samples.merge_batch(gaps[0], gaps[1], 0.25, 2), gaps[2], 0.25, 2)
    assert r["kernel_gap"]["samples"]["numpy"] == series(2.0)  # the quietest one is kept


def test_remeasuring_stops_at_the_budget_and_the_batch_limit(monkeypatch):
    calls = []

    def fake_child(args, kind, argv, workloads=None, extra=()):
        calls.append((kind, tuple(workloads), extra))
        return {"workloads": {workloads[0]: dict(row(1.0, n=2), batches=[
            {"rounds": 2, "contention": 0.0}])}}
    monkeypatch.setattr(schedule, "run_child", fake_child)
    monkeypatch.setattr(schedule, "open_workloads", lambda raws: {"cnn"})
    args = cli.parse_args(TINY + ["--workloads", "cnn,lstm", "--budget", "60"])
    raws = {k: {"cores": 2, "workloads": {"cnn": row(1.0, n=2)}} for k in ("default", "torch")}
    extra = schedule.remeasure(args, [], raws, ["default", "torch"], {"cnn": 0.0})
    assert extra == {"cnn": schedule.MAX_EXTRA_BATCHES}
    assert len(calls) == 2 * schedule.MAX_EXTRA_BATCHES
    assert all(w == ("cnn",) and e == ("--timing-only",) for _, w, e in calls)
    assert raws["torch"]["workloads"]["cnn"]["rounds"] == 2 + 2 * schedule.MAX_EXTRA_BATCHES
    calls.clear()
    assert schedule.remeasure(args, [], raws, ["default"], {"cnn": 61.0}) == {}
    assert calls == []  # a batch that does not fit in the budget is not started


def fake_run(monkeypatch, par, spread):
    """main() on canned measurements: mlp-chain, ours `par` s against PyTorch's 1.0 s."""
    def measure_all(args, argv):
        return {"default": raw(**{"mlp-chain": row(par, par, spread=spread)}),
                "torch": raw("torch", **{"mlp-chain": torch_row(1.0, spread)})}, {}
    monkeypatch.setattr(cli, "measure_all", measure_all)
    monkeypatch.setattr(cli, "torch_available", lambda args: True)


@pytest.mark.parametrize("par,spread,code,status", [
    (1.5, 0.0, 1, "MISS"), (1.0, 0.3, 0, "unresolved"), (0.5, 0.0, 0, "PASS")])
def test_check_fails_on_miss_only(monkeypatch, capsys, par, spread, code, status):
    fake_run(monkeypatch, par, spread)
    assert compare.main(FULL + ["--check", "--workloads", "mlp-chain"]) == code
    out, err = capsys.readouterr()
    assert f"- {status:4s} 3. backward_parallel faster than PyTorch's backward" in out
    assert ("--check: MISS: default target 3" in err) == (code == 1)
    assert compare.main(FULL + ["--workloads", "mlp-chain"]) == 0  # without --check: always 0


@pytest.mark.timeout(400)  # a deadlock guard: children run the benchmark under load
def test_tiny_run_with_forward_step_and_the_pytorch_child(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    names = ["tiny-nodes", "wide-elementwise"]
    proc = subprocess.run([sys.executable, "-m", "stress.compare", *TINY, "--reps", "2",
                           "--allocator", "default", "--workloads", ",".join(names),
                           "--out", str(out), *FULL], cwd=ROOT, capture_output=True, text=True,
                          timeout=360)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    ours, torch = result["settings"]["default"], result["torch_child"]
    assert torch["setting"] == "torch" and torch["env"]["torch_threads"] == torch["cores"]
    for n in names:
        r, t = ours["workloads"][n], torch["workloads"][n]
        assert set(r["forward"]) == set(r["step"]) == set(r["times"]) >= {"seq", "torch"}
        assert list(t["times"]) == ["torch"] and len(t["step"]["torch"]) == 2
    gap = torch["workloads"]["wide-elementwise"]["kernel_gap"]
    assert gap["n"] == 500 and set(gap["samples"]) == {"numpy", "torch1", "torchN"}
    assert result["targets"] == targets.evaluate_all(result["settings"], torch)  # from JSON
    for head in ("| fwd ms | torch fwd ms | fwd / torch | bwd par ms | torch bwd ms |",
                 "## PyTorch in the benchmark's process and in its own process",
                 "numpy's per-element kernel gap (wide-elementwise's 500 float64"):
        assert head in proc.stdout


def test_without_torch_the_report_says_how_to_get_its_columns(monkeypatch, capsys):
    monkeypatch.setattr(cli, "torch_available", lambda args: False)
    monkeypatch.setattr(cli, "measure_all", lambda args, argv: (
        {"default": raw(**{"mlp-chain": row(1.0)})}, {}))
    assert compare.main(FULL + ["--check", "--workloads", "mlp-chain"]) == 0
    out, err = capsys.readouterr()
    assert "make bench TORCH=1" in err and "Note: no PyTorch columns" in out
    assert "- n/a  3. backward_parallel faster than PyTorch's backward" in out
    assert "| torch fwd ms |" not in out


@pytest.mark.timeout(400)  # a deadlock guard: the benchmark's child under load
def test_a_broken_torch_drops_the_pytorch_columns_not_the_run(tmp_path):
    # a `torch` that is found but does not import (e.g. a missing shared library)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('broken for a test')\n")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "stress.compare", *TINY, "--reps", "1",
                           "--allocator", "default", "--workloads", "tiny-nodes,wide-elementwise",
                           "--out", str(out), *FULL], cwd=ROOT, capture_output=True, text=True,
                          timeout=360, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the PyTorch child failed" in proc.stderr
    # the reason once (the PyTorch child's), not once per child and workload
    assert proc.stderr.count("torch does not import: ImportError: broken for a test") == 1
    assert proc.stderr.count("torch does not import") == 1
    result = json.loads(out.read_text())
    assert result["torch_child"] is None and "Note: no PyTorch columns" in proc.stdout


# ---- the first screen: verdict, torch once, schema, progress (issue 29) ------------------
def fake_result(par=0.5, spread=0.0, contention=0.0, torch=True, lstm=1.5):
    """A result of main()'s layout from canned measurements: cnn and lstm, PyTorch 1.0 s."""
    wls = {"cnn": row(1.0, par, spread=spread, contention=contention), "lstm": row(1.0, lstm)}
    settings = {"default": raw(**wls)}
    tc = raw("torch", **{n: torch_row(1.0, spread) for n in wls}) if torch else None
    return {"meta": {"date": "D", "command": "c", "torch_hint": None if torch else "HINT"},
            "settings": settings, "torch_child": tc,
            "targets": targets.evaluate_all(settings, tc)}


def test_workload_verdict_from_the_targets_checks():
    def check(name, st):
        return {"workload": name, "status": st}
    ts = [{"id": 1, "checks": [check("a", "PASS"), check("b", "noisy"), check("c", "PASS")]},
          {"id": 3, "checks": [check("a", "PASS"), check("b", "PASS"), check("c", "MISS")]},
          {"id": 7, "checks": [check("c", "unresolved"), check("d", "unresolved")]}]
    assert verdict.workload_verdict("a", ts) == ("PASS", [])
    assert verdict.workload_verdict("b", ts) == ("unresolved", [1])  # noisy: not scored
    assert verdict.workload_verdict("c", ts) == ("MISS", [3])  # a MISS decides it
    assert verdict.workload_verdict("d", ts) == ("unresolved", [7])
    assert verdict.workload_verdict("e", ts) == ("n/a", [])
    assert verdict.verdict_cell("MISS", [3, 7], False) == "MISS (targets 3, 7)"
    assert verdict.verdict_cell("unresolved", [1], False) == "unresolved (target 1)"
    assert verdict.verdict_cell("unresolved", [1, 3], True) == \
        "unresolved (noisy: measured under other load, not scored)"
    assert verdict.verdict_cell("PASS", [], False) == "PASS"


def test_verdict_table_leads_with_ratios_and_verdicts():
    text = verdict.verdict(fake_result(), {"Plot": "p.png"})
    lines = text.splitlines()
    assert lines[0].startswith("# Verdict: backward_parallel against the sequential engine")
    assert lines[2] == ("| workload | speedup over sequential (2 cores) | time / PyTorch's "
                        "(below 1: faster) | training step / PyTorch's | verdict |")
    # cnn: 2x over seq, half PyTorch's time; lstm slower than seq and than PyTorch
    assert "| cnn | 2.00x [2.00, 2.00] | 0.50x [0.50, 0.50] | 0.50x [0.50, 0.50] | PASS |" \
        in lines
    lstm = next(x for x in lines if x.startswith("| lstm |"))
    assert lstm.startswith("| lstm | 0.67x [0.67, 0.67] | 1.50x [1.50, 1.50] | "
                           "1.50x [1.50, 1.50] | MISS (targets 1")
    assert "Plot: p.png" in lines
    assert any(x.startswith("Targets: ") and " MISS, " in x for x in lines)
    assert "wait-quiet" not in text  # nothing noisy: no hint


def test_verdict_without_torch_says_so_once_and_hints_at_a_quiet_run():
    text = verdict.verdict(fake_result(contention=1.0, torch=False, lstm=0.5), {})
    assert "PyTorch" not in text.splitlines()[2]  # no column
    assert text.count("No torch: HINT.") == 1 and text.count("torch") == 1
    assert "| cnn | 2.00x [2.00, 2.00] | unresolved (noisy: measured under other load" in text
    summary = next(x for x in text.splitlines() if x.startswith("Targets: "))
    assert "because rows were measured under other load" in summary
    assert "`make bench BENCH_ARGS='--wait-quiet 120'`" in summary
    c = verdict.counts(fake_result(contention=1.0, torch=False, lstm=0.5)["targets"])
    assert c["noisy"] >= 1 and sum(c[k] for k in ("PASS", "MISS", "unresolved", "n/a")) == 12


def test_eta_and_progress_lines():
    assert [verdict.eta_text(s) for s in (None, -1, 0, 44.6, 60, 130, 3599, 3725)] == \
        ["?", "?", "0s", "45s", "1m00s", "2m10s", "59m59s", "1h02m"]
    assert verdict.progress_line(0, 12, "cnn", 0.0) == "[1/12] cnn ... ETA ?"
    assert verdict.progress_line(2, 12, "lstm", 26.0) == "[3/12] lstm ... ETA 2m10s"


def test_torch_missing_is_said_once_and_the_children_are_told(monkeypatch, capsys, tmp_path):
    seen = {}

    def measure_all(args, argv):
        seen["no_torch"] = args.no_torch
        return {"default": raw(**{"mlp-chain": row(1.0)})}, {}
    monkeypatch.setattr(cli, "torch_available", lambda args: False)
    monkeypatch.setattr(cli, "measure_all", measure_all)
    out = tmp_path / "r.json"
    assert compare.main(["--no-plot", "--report", str(tmp_path / "r.md"), "--out", str(out),
                         "--workloads", "mlp-chain"]) == 0
    stdout, err = capsys.readouterr()
    assert seen["no_torch"] and err.count("torch is not installed") == 1
    assert "make bench TORCH=1" in err and stdout.count("make bench TORCH=1") == 1
    assert f"Full tables (markdown): {tmp_path / 'r.md'}" in stdout
    assert "## Allocator: default" in (tmp_path / "r.md").read_text()
    assert "## Allocator: default" not in stdout  # the tables went to the file
    # the children get --no-torch, so none of them tries (and says so) again
    cmds = []
    monkeypatch.setattr(children.subprocess, "run", lambda cmd, **kw: cmds.append(cmd))
    monkeypatch.setattr(children.json, "load", lambda f: {})
    args = cli.parse_args(["--no-torch"])
    children.run_child(args, "default", [], workloads=["cnn"])
    assert "--no-torch" in cmds[0]
    assert children.passed_on(["--no-plot", "--report", "x.md", "--seed", "1"]) == ["--seed", "1"]


def test_the_json_has_a_schema_version(monkeypatch, capsys, tmp_path):
    fake_run(monkeypatch, 0.5, 0.0)
    out = tmp_path / "sub" / "r.json"  # its directory is made
    assert compare.main(FULL + ["--out", str(out), "--workloads", "mlp-chain"]) == 0
    result = json.loads(out.read_text())
    assert result["schema_version"] == cli.SCHEMA_VERSION == 1
    assert f"All measurements (JSON): {out}" in capsys.readouterr().out


def test_no_matplotlib_is_said_once_and_the_run_goes_on(monkeypatch, capsys, tmp_path):
    import builtins
    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib for a test")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_mpl)
    fake_run(monkeypatch, 0.5, 0.0)
    png = tmp_path / "p.png"
    assert compare.main(["--report", "-", "--plot", str(png), "--workloads", "mlp-chain"]) == 0
    out, err = capsys.readouterr()
    assert err.count("no plot: matplotlib is not installed") == 1 and not png.exists()
    assert "Plot: not written: matplotlib is not installed" in out
    assert cli.parse_args([]).plot == cli.DEFAULT_PLOT  # on by default
    assert cli.parse_args(["--no-plot"]).plot is None


@pytest.mark.parametrize("lo,hi,words", [
    (-0.3, -0.1, "Below 0: the overlapped DDP step was slower"),
    (-0.15, 0.14, "no measurable share is hidden"),
    (1.1, 1.3, "Above 1"), (0.12, 0.2, "Overlap hid 12% to 20%")])
def test_mpi_hidden_share_is_explained(lo, hi, words):
    from stress.compare import mpi
    assert words in mpi.hidden_meaning(stats.Interval((lo + hi) / 2, lo, hi))


# ---- the float64 scientific rows and the competing-load row (issue 28, items 4-5) ---------
def sci_result(times: dict, contention=0.0, rows=("sci-grad", "sci-hvp")) -> dict:
    """A `scientific.run` result from canned medians: {variant: seconds} per library
    (ours "pa" 1.0 s), the results agreeing to 1e-16."""
    from stress.compare import scientific
    libs = {}
    for variant, t in {"pa": 1.0, **times}.items():
        lib = variant.split("-")[0]
        r = libs.setdefault(lib, {"lib": lib, "cores": 2, "threads": 2, "version": "v",
                                  "size": "quick", "reps": 7, "seed": 0,
                                  "contention": contention, "rows": {}})
        for n in rows:
            r["rows"].setdefault(n, {})[variant] = {"times": series(t, 7, 0.01), "inner": 1}
    agree = {f"{n}/{v}": 1e-16 for v in times for n in rows}
    return {"libs": libs, "agreement": agree, "rows": list(rows),
            "missing": [lib for lib in scientific.LIBS if lib not in libs]}


def test_scientific_target_and_table_from_the_libraries_present():
    from stress.compare import scientific as S
    st = "status"
    assert S.evaluate_target(sci_result({"jax": 2.0, "autograd": 3.0}), 0.25)[st] == "PASS"
    assert S.evaluate_target(sci_result({"jax": 0.5, "autograd": 3.0}), 0.25)[st] == "MISS"
    # under other load: shown, not scored
    assert S.evaluate_target(sci_result({"jax": 2.0, "autograd": 3.0}, 1.0), 0.25)[st] == \
        "unresolved"
    # one of the two absent: never PASS (the target names both), a MISS stays a MISS
    one = S.evaluate_target(sci_result({"jax": 2.0}), 0.25)
    assert one[st] == "unresolved" and "not installed: HIPS autograd" in one["detail"]
    assert S.evaluate_target(sci_result({"jax": 0.5}), 0.25)[st] == "MISS"
    # neither: unresolved, and the table has only the columns measured
    none = sci_result({"torch": 2.0, "torch-vec": 4.0})
    t = S.evaluate_target(none, 0.25)
    assert t[st] == "unresolved" and "neither is installed" in t["detail"]
    head = S.table(none).splitlines()[0]
    assert "PyTorch: ms" in head and "vectorize=True" in head
    assert "JAX" not in head and "HIPS" not in head
    text = "\n".join(S.section(none))
    assert "Not installed (no column): JAX (jit, x64), HIPS autograd" in text
    # ours 1.0 s against JAX's 2.0 s: 0.50x with its interval, in the row
    full = S.table(sci_result({"jax": 2.0, "autograd": 4.0}))
    assert "| sci-grad | 1000.0 | 2000.0: 0.50x [" in full and "4000.0: 0.25x [" in full


def test_scientific_columns_disappear_when_a_library_is_absent(monkeypatch):
    from stress.compare import scientific as S
    real = S.importlib.util.find_spec
    monkeypatch.setattr(S.importlib.util, "find_spec",
                        lambda name: None if name in ("jax", "autograd") else real(name))
    started = []
    monkeypatch.setattr(S, "run_child", lambda lib, *a: started.append(lib) or (
        {"rows": {"sci-hvp": {lib: {"times": [1.0], "inner": 1}}}, "contention": 0.0,
         "seed": 0}, {f"sci-hvp/{lib}/0": np.ones(3)}))
    sci = S.run(["sci-hvp"], "tiny", 1, 0, lambda m: None, libs=["pa", "jax", "autograd"])
    assert started == ["pa"] and list(sci["libs"]) == ["pa"]
    assert sci["missing"] == ["torch", "jax", "autograd"]
    assert S.evaluate_target(sci, 0.25)["status"] == "unresolved"


@pytest.mark.timeout(400)  # a deadlock guard: children under load
def test_scientific_smoke_every_installed_library_computes_our_numbers():
    # one tiny row through the real children of every library installed here
    from stress.compare import scientific as S
    sci = S.run(["sci-hvp", "sci-jacobian"], "tiny", 1, 0, lambda m: None)
    assert list(sci["libs"])[0] == "pa"
    for lib in ("torch", "jax", "autograd"):
        assert (lib in sci["libs"]) == S.available(lib)
    for key, diff in sci["agreement"].items():
        assert diff is not None and diff < 1e-12, key
    variants = {v for r in sci["libs"].values() for n in r["rows"].values() for v in n}
    assert {k.split("/")[1] for k in sci["agreement"]} == variants - {"pa"}
    if "jax" in sci["libs"]:  # x64 on: our float64 numbers, not float32's
        assert sci["agreement"]["sci-hvp/jax"] < 1e-12


@pytest.mark.timeout(400)  # a deadlock guard: the benchmark's children under load
def test_a_broken_optional_library_drops_its_column_not_the_run(tmp_path):
    # `jax` and `autograd` that are found but do not import: their children fail
    for name in ("jax", "autograd"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('broken for a test')\n")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "stress.compare", *TINY, "--reps", "1",
                           "--no-torch", "--workloads", "sci-jacobian", "--out", str(out),
                           *FULL], cwd=ROOT, capture_output=True, text=True, timeout=360,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the JAX (jit, x64) child failed" in proc.stderr
    assert "the HIPS autograd child failed" in proc.stderr
    result = json.loads(out.read_text())
    assert result["settings"] == {} and list(result["scientific"]["libs"]) == ["pa"]
    assert result["extra_targets"] == cli.extra_targets(result, 0.25)  # from the JSON
    assert result["extra_targets"][0]["status"] == "unresolved"
    assert "## Float64 scientific work" in proc.stdout and "| sci-jacobian | " in proc.stdout
    assert "JAX (jit, x64): ms" not in proc.stdout


def loaded_result(quiet=1.0, loaded=1.5, torch=None) -> dict:
    def lib(name, q, ld):
        return {"lib": name, "cores": 2, "size": "quick", "reps": 7, "seed": 0,
                "workload": "mnist-cnn-f32", "steps_per_phase": 3,
                "quiet": series(q, 7, 0.01), "loaded": series(ld, 7, 0.01),
                "quiet_cores": [1.0] * 7, "loaded_cores": [1.0] * 7, "idle_cores": [0.0] * 4,
                "contention_with_spinner": 1.0}
    out = {"pa": lib("pa", quiet, loaded)}
    if torch:
        out["torch"] = lib("torch", 1.0, torch)
    return out


def test_loaded_row_ratios_target_and_table():
    from stress.compare import loaded as L
    assert L.evaluate_target(loaded_result(1.0, 1.5), None)["status"] == "PASS"
    miss = L.evaluate_target(loaded_result(1.0, 3.0, torch=12.0), None)
    assert miss["status"] == "MISS" and "PyTorch's 12.00x" in miss["detail"]
    assert L.ratio(loaded_result(1.0, 1.5), "pa").point == pytest.approx(1.5)
    text = L.table(loaded_result(0.01, 0.02, torch=12.0))
    assert "| ours | 10.0 | 20.0 | 2.00x [" in text and "| PyTorch | 1000.0 | 12000.0 | " in text
    assert L.evaluate_target(None)["status"] == "n/a" and L.section(None) == []


def test_the_spinner_runs_only_inside_its_block():
    from stress.compare import loaded as L
    with L.Spinner() as s:
        assert s.proc.poll() is None  # spinning
    assert s.proc.poll() is not None  # stopped and reaped


def test_extra_rows_are_selected_like_workloads():
    a = cli.parse_args(["--workloads", "scientific,loaded-step"])
    assert a.workloads == [] and a.scientific == ["sci-grad", "sci-hessian", "sci-jacobian",
                                                   "sci-hvp"] and a.loaded
    a = cli.parse_args(["--workloads", "cnn,sci-hvp"])
    assert (a.workloads, a.scientific, a.loaded) == (["cnn"], ["sci-hvp"], False)
    a = cli.parse_args(["--quick"])  # the default: everything
    assert a.workloads == list(workloads.WORKLOADS) and len(a.scientific) == 4 and a.loaded
    assert a.width == ["per-sample-grad", "multi-loss"]
    a = cli.parse_args(["--workloads", "width"])
    assert (a.workloads, a.scientific, a.width) == ([], [], ["per-sample-grad", "multi-loss"])
    assert cli.parse_args(["--workloads", "multi-loss"]).width == ["multi-loss"]


@pytest.mark.timeout(300)
def test_width_rows_measure_every_configuration_and_report_them():
    from stress.compare import width_rows as W
    result = W.run_here(list(W.ROWS), "tiny", 1, 0, "pa")
    psg, ml = result["rows"]["per-sample-grad"][0], result["rows"]["multi-loss"][0]
    assert set(psg["samples"]) == {"pa-batched", "pa-batched-one-by-one", "pa-loop"}
    assert set(ml["samples"]) == {"pa-default", "pa-parallel", "pa-sequential",
                                  "pa-sequential-blas1"}
    assert ml["decision"].startswith(("sequential: ", "parallel: "))
    text = "\n".join(W.section(result))
    assert "| N=4, hidden 8 | " in text and "| batch 4, hidden 8, 2 heads | " in text
    assert "n/a" in text  # no PyTorch columns here


def test_check_counts_a_missed_row_target():
    from stress.compare import loaded as L
    t14 = L.evaluate_target(loaded_result(1.0, 3.0), None)
    result = {"targets": {"default": []}, "extra_targets": [t14]}
    assert cli.missed(result) == [("rows", 14)]
    assert verdict.counts(dict(result["targets"], rows=[t14]))["MISS"] == 1
