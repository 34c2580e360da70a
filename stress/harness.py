"""The stress harness: generate graphs, run them on the sequential engine and on
parallel engines, compare, hammer one engine from many threads, inject faults,
watch for hangs and leaks, and report.

Library use (what the tests do)::

    from stress.harness import Config, run
    report = run(Config(iterations=20, profile="quick"))
    assert report.ok, report.summary()

`run(cfg, engine_factory=f)` checks engines made by `f(num_workers, variant)`
instead of the real ones (anything with `.backward`, `.grad` and `.close`), so a
deliberately broken engine can be checked to be caught.

Work is split in units; unit i of a run with `--seed K` uses graph seed
K * 1,000,000 + i, family `families[i % F]` and fault kind `faults[i % N]`,
and runs: the comparison (every engine target), the multi-root check (calls with
several roots: `stress.multiroot`), the create_graph check (when the family is in
`Config.create_graph`: `stress.higher`), the concurrency check (when threads > 1)
and one fault (now and then with create_graph: `stress.faults`); after each of them
every BLAS library must have the thread count it had when the run started. A failure
names its family and seed, and `python -m stress --replay SEED --families F ...`
re-runs exactly that unit.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time

import numpy as np

import parallel_autograd as pa

from . import faults as faults_mod
from . import graphs, higher, multiroot
from .checks import (VARIANTS, Outcome, default_engine_factory, diff, diff_all, leaf_diffs,
                     make_priors, set_grads)
from .leaks import LeakMonitor, pinned_blas
from .report import Failure, Progress, Report, interactive
from .watchdog import HangDetected, Watchdog, dump_all_stacks

PROFILES = {
    # scale: graph sizes (1.0: a 100,000-node deep chain); aux: concurrency/fault graphs
    "quick": {"scale": 0.02, "aux": 0.02, "checkpoint_every": 3.0},
    "default": {"scale": 1.0, "aux": 0.1, "checkpoint_every": 10.0},
}


@dataclasses.dataclass
class Config:
    duration: float | None = None       # seconds; the run ends after the unit in progress
    iterations: int | None = None       # units (graph + checks); both None: 60 seconds
    seed: int = 0
    workers: tuple = (1, 2, 4)
    threads: int = 4                    # concurrency mode callers (1: off)
    rounds: int = 2                     # calls per concurrency caller
    families: tuple = tuple(graphs.FAMILIES)
    faults: tuple = faults_mod.KINDS    # () : no fault injection
    variants: tuple = VARIANTS
    create_graph: tuple = higher.CREATE_GRAPH_FAMILIES  # families with the create_graph step
    multi_root: int = 2                 # multi-root calls per parallel target (0: no step)
    switch_interval: float | None = None  # sys.setswitchinterval for the run (races)
    profile: str = "default"
    scale: float | None = None          # overrides the profile's
    deadline: float = 30.0              # seconds per engine call, plus deadline_per_node
    deadline_per_node: float = 2e-4
    stall_deadline: float = 0.3         # the `stall` fault's deliberately short deadline
    on_hang: str = "continue"           # or "stop"
    fail_fast: bool = False
    checkpoint_every: float | None = None
    tracemalloc: bool = True            # the leak probe at each checkpoint
    leak_bytes: int = 64 * 1024         # probe growth per iteration counted as a leak
    rss_limit_mb: float = 1024.0        # RSS growth over the warmed-up baseline
    blas_threads: int | None = 1        # pin BLAS (OpenBLAS GEMM bits depend on threads)
    big_nodes: int = 20_000             # above: one engine variant per worker count
    replay: int | None = None
    progress: bool | None = None        # None: only on a terminal outside CI
    report_path: str | None = None
    on_stuck: str = "wait"              # a call that ignores the watchdog: "wait" | "exit"

    def as_dict(self):
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


class Harness:
    def __init__(self, cfg: Config, engine_factory=None, families=None, stream=None):
        self.cfg = cfg
        prof = PROFILES[cfg.profile]
        self.scale = cfg.scale if cfg.scale is not None else prof["scale"]
        self.aux_scale = min(self.scale, prof["aux"])
        self.checkpoint_every = cfg.checkpoint_every or prof["checkpoint_every"]
        self.gens = dict(graphs.FAMILIES)
        self.gens.update(families or {})
        unknown = [f for f in cfg.families + tuple(cfg.create_graph) if f not in self.gens]
        if unknown:
            raise ValueError(f"unknown families: {', '.join(unknown)} "
                             f"(known: {', '.join(self.gens)})")
        bad = [k for k in cfg.faults if k not in faults_mod.ALL_KINDS]
        if bad:
            raise ValueError(f"unknown fault kinds: {', '.join(bad)} "
                             f"(known: {', '.join(faults_mod.ALL_KINDS)})")
        self.families = list(cfg.families)
        self.factory = engine_factory or default_engine_factory
        self.stream = stream or sys.stdout
        self.engines = {}
        self.report = Report(cfg.as_dict())
        self.wd = Watchdog(on_stuck=self._on_stuck)
        self.leaks = LeakMonitor(self)
        enabled = interactive() if cfg.progress is None else cfg.progress
        self.progress = Progress(self.report, enabled)
        self.stop_reason = None

    # ---- engines ------------------------------------------------------------------------------
    def engine(self, workers, variant):
        key = (workers, variant)
        eng = self.engines.get(key)
        if eng is None:
            eng = self.engines[key] = self.factory(workers, variant)
        return eng

    def targets(self, rng, nodes: int = 0):
        """(workers, variant) pairs one graph is checked on. One worker: the variants
        are all the sequential fallback, so once is enough. Big graphs: one variant
        per worker count (chosen from the seed)."""
        out = []
        for w in self.cfg.workers:
            vs = list(self.cfg.variants)
            if w == 1:
                vs = vs[:1]
            elif rng is not None and nodes > self.cfg.big_nodes:
                vs = [vs[int(rng.integers(len(vs)))]]
            out += [(w, v) for v in vs]
        return out

    def close_engine(self, eng, what, timeout=10.0):
        t = threading.Thread(target=eng.close, name="stress-close", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            self.fail("hang", "(lifecycle)", None,
                      f"{what}: close() did not return within {timeout:.0f}s",
                      {"stacks": dump_all_stacks()})

    # ---- calls --------------------------------------------------------------------------------
    def deadline_for(self, case):
        return self.cfg.deadline + case.nodes * self.cfg.deadline_per_node

    def guarded(self, fn, deadline, label) -> Outcome:
        """Run `fn()` under the watchdog; exceptions are captured, not raised (except a
        real Ctrl+C)."""
        out = Outcome()
        g = self.wd.guard(deadline, label)
        t0 = time.perf_counter()
        try:
            with g:
                out.value = fn()
        except HangDetected:
            out.broken = True
        except KeyboardInterrupt as e:
            if faults_mod.INTERRUPT_TAG not in str(e):
                raise
            out.exc = e
        except BaseException as e:  # noqa: B036 - faults raise BaseException subclasses
            out.exc = e
        out.elapsed = time.perf_counter() - t0
        if g.fired:
            out.hang = True
            out.exc = None
            out.dump = g.dump
            if self.cfg.on_hang == "stop":
                self.stop_reason = f"hang in {label} (--on-hang stop)"
        self.report.engine_calls += 1
        return out

    def _on_stuck(self, g):
        msg = (f"stress: {g.label} is stuck {self.wd.grace:.0f}s after its deadline and "
               f"ignores the watchdog")
        self.report.notes.append(msg)
        if self.cfg.on_stuck == "exit":
            import os
            self.fail("hang", "(stuck)", None, msg, {"stacks": g.dump})
            self.report.stopped_early = msg
            self.report.elapsed = time.time() - self.report.start
            self.progress.close()
            print(self.report.summary(), file=self.stream, flush=True)
            if self.cfg.report_path:
                self.report.write_json(self.cfg.report_path)
            os._exit(3)

    # ---- results ------------------------------------------------------------------------------
    def replay_cmd(self, family, seed, fault=None):
        c = self.cfg
        parts = ["python -m stress", f"--replay {seed}", f"--families {family}",
                 f"--workers {','.join(map(str, c.workers))}", f"--threads {c.threads}",
                 f"--profile {c.profile}"]
        if c.scale is not None:
            parts.append(f"--scale {c.scale}")
        parts.append(f"--faults {fault}" if fault else "--no-faults")
        if tuple(c.variants) != VARIANTS:
            parts.append(f"--variants {','.join(c.variants)}")
        if (family in c.create_graph) != (family in higher.CREATE_GRAPH_FAMILIES):
            parts.append(f"--create-graph {family}" if family in c.create_graph
                         else "--no-create-graph")
        if c.multi_root != Config.multi_root:
            parts.append(f"--multi-root {c.multi_root}")
        if c.switch_interval:
            parts.append(f"--switch-interval {c.switch_interval:g}")
        return " ".join(parts)

    def fail(self, kind, family, seed, message, details=None, fault=None):
        replay = self.replay_cmd(family, seed, fault) if seed is not None and \
            family in self.gens else None
        f = self.report.fail(Failure(kind, family, seed, message, replay, details))
        if kind == "hang":
            self.report.fam(family).hangs += 1
        elif kind in ("error", "lost-fault", "wrong-fault"):
            self.report.fam(family).errors += 1
        if self.cfg.fail_fast and self.stop_reason is None:
            self.stop_reason = f"first failure ({kind}) with --fail-fast"
        return f

    def count_comparisons(self, family, n, mismatches):
        st = self.report.fam(family)
        st.comparisons += n
        st.mismatches += mismatches

    # ---- the checks -----------------------------------------------------------------------------
    def check_compare(self, family, seed):
        """Sequential vs every engine target: leaf grads and grad() results, bitwise."""
        c = self._comparison(family, seed)
        if not self._sequential_refs(c):
            return
        targets = self.targets(c.rng, c.case.nodes)
        k = int(c.rng.integers(len(targets)))
        targets = targets[:k] + targets[k + 1:] + [targets[k]]  # the last frees the graph
        k2 = int(c.rng.integers(len(targets)))
        for i, (w, variant) in enumerate(targets):
            if self.stop_reason:
                return
            self._check_target(c, self.engine(w, variant), f"{variant} x{w}",
                               two_calls=c.twice and i == k2, final=i == len(targets) - 1)
        self.progress.update(f"{family} seed {seed}")

    def _comparison(self, family, seed):
        """Build graph `seed` of `family` and draw what its comparison uses: the priors
        in .grad, the grad() inputs, whether to check two calls into the same leaves."""
        case = graphs.build(family, seed, self.scale, families=self.gens)
        st = self.report.fam(family)
        st.graphs += 1
        st.nodes += case.nodes
        rng = np.random.default_rng([seed, 1])
        priors = make_priors(case.leaves, rng)
        cand = case.grad_leaves + case.extras
        pick = rng.random(len(cand)) < 0.5
        inputs = [t for t, p in zip(cand, pick) if p] or cand[:1]
        twice = rng.random() < 0.5
        return _Comparison(family, seed, case, rng, priors, inputs, twice,
                           f"{family} seed={seed}", self.deadline_for(case))

    def _compared_call(self, c, fn, what) -> Outcome | None:
        """`fn()` guarded with the comparison's deadline; its Outcome, or None after
        reporting a hang or an error."""
        out = self.guarded(fn, c.deadline, f"{c.label} {what}")
        return out if self._clean(out, c.family, c.seed, what) else None

    def _sequential_refs(self, c) -> bool:
        """The sequential engine's results: leaf grads after one call (and after two,
        when `c.twice`) and grad()'s; False if it failed (reported)."""
        case, leaves = c.case, c.leaves
        set_grads(leaves, c.priors)
        if not self._compared_call(c, lambda: pa.backward(case.root, case.seed_grad,
                                                          retain_graph=True),
                                   "sequential backward"):
            return False
        c.ref = [None if t.grad is None else np.array(t.grad, copy=True) for t in leaves]
        out = self._compared_call(c, lambda: pa.grad([case.root], c.inputs, [case.seed_grad],
                                                     retain_graph=True, allow_unused=True),
                                  "sequential grad()")
        if out is None:
            return False
        c.ref_grad = out.value
        if c.twice:  # accumulation across calls: a second backward on top of the first
            if not self._compared_call(c, lambda: pa.backward(case.root, case.seed_grad,
                                                              retain_graph=True),
                                       "sequential backward, second call into the same "
                                       "leaves"):
                return False
            c.ref_twice = [t.grad for t in leaves]
        return True

    def _check_target(self, c, eng, who, two_calls, final):
        """One engine against the sequential results: two backward calls into the same
        leaves (if `two_calls`), grad() (small graphs, and always on the `final` target),
        then one backward (freeing the graph if `final`)."""
        case, leaves = c.case, c.leaves
        if two_calls:
            set_grads(leaves, c.priors)
            if all(self._compared_call(c, lambda: eng.backward(case.root, case.seed_grad,
                                                               retain_graph=True),
                                       f"{who} backward, call {n} into the same leaves")
                   for n in (1, 2)):
                self._mismatch(c.family, c.seed, f"{who} two backward calls", len(leaves),
                               leaf_diffs(c.ref_twice, leaves))
        if case.nodes <= self.cfg.big_nodes or final:
            out = self._compared_call(c, lambda: eng.grad([case.root], c.inputs,
                                                          [case.seed_grad], retain_graph=True,
                                                          allow_unused=True),
                                      f"{who} grad()")
            if out is not None:
                self._mismatch(c.family, c.seed, f"{who} grad()", len(c.inputs),
                               diff_all(c.ref_grad, out.value, "grad() input"))
        set_grads(leaves, c.priors)
        if self._compared_call(c, lambda: eng.backward(case.root, case.seed_grad,
                                                       retain_graph=not final),
                               f"{who} backward"):
            self._mismatch(c.family, c.seed, f"{who} backward", len(leaves),
                           leaf_diffs(c.ref, leaves))

    def _clean(self, out, family, seed, what):
        if out.hang:
            self.fail("hang", family, seed, f"{what} exceeded its deadline ({out.elapsed:.1f}s)",
                      {"stacks": out.dump})
            return False
        if out.exc is not None:
            self.fail("error", family, seed,
                      f"{what} raised {type(out.exc).__name__}: {out.exc}",
                      {"exception": repr(out.exc)})
            return False
        return True

    def _mismatch(self, family, seed, what, n, problems):
        self.count_comparisons(family, n, len(problems))
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            self.fail("mismatch", family, seed, f"{what}: {problems[0]}{more}",
                      {"problems": problems[:20]})

    def check_concurrency(self, family, seed):
        """T threads call one engine at once, each on its own graphs over shared leaves;
        the leaves must hold the sum of every call's contribution."""
        cc = self._concurrency(family, seed)
        contrib, expected_grad = self._expected_contributions(cc)
        set_grads(cc.leaves, cc.priors)
        results = self._run_callers(cc)
        T, R = self.cfg.threads, self.cfg.rounds
        self.report.fam(family).graphs += T * R
        self.report.fam(family).nodes += cc.template.nodes * T * R
        if results is None:
            self.fail("hang", family, seed, f"{cc.where}: a caller thread never returned",
                      {"stacks": dump_all_stacks()})
            return
        bad = False
        for (t, r), out in sorted(results.items()):
            if not self._clean(out, family, seed, f"{cc.where}: caller {t} call {r}"):
                bad = True
            elif (t, r) in expected_grad:
                problems = diff_all(expected_grad[t, r], out.value, f"caller {t} grad()")
                self._mismatch(family, seed, cc.where, len(problems) or len(out.value),
                               problems)
        if bad:
            return
        problems = []
        for j, leaf in enumerate(cc.leaves):
            p = _leaf_sum_problem(j, leaf, cc.priors[j],
                                  [c[j] for c in contrib if c[j] is not None])
            if p:
                problems.append(p)
        self._mismatch(family, seed, cc.where, len(cc.leaves), problems)

    def _concurrency(self, family, seed):
        """The concurrency check's set-up: the shared leaves (from a template graph),
        the engine, each caller's calls as (mode, seed gradient) with every third caller
        using grad(), and the priors in .grad."""
        cfg = self.cfg
        rng = np.random.default_rng([seed, 2])
        scale = self.aux_scale * graphs.AUX_FACTOR.get(family, 1.0)
        shared = {}
        template = graphs.build(family, seed, scale, shared=shared, families=self.gens)
        w = max(cfg.workers)
        eng = self.engine(w, "queue" if "queue" in cfg.variants else cfg.variants[0])
        plan = [[("grad" if t % 3 == 2 else "backward",
                  np.asarray(rng.standard_normal(template.root.shape),
                             dtype=template.root.dtype)) for _ in range(cfg.rounds)]
                for t in range(cfg.threads)]
        priors = make_priors(template.leaves, rng)
        where = f"concurrency ({cfg.threads} callers x {cfg.rounds} calls, {w} workers)"
        return _Concurrency(family, seed, scale, shared, template, eng, plan, priors, where,
                            self.deadline_for(template) * cfg.rounds)

    def _expected_contributions(self, cc):
        """The callers' graphs on private leaves, sequentially: per backward call its
        list of per-leaf gradients, and per (caller, call) using grad() its results."""
        contrib, expected_grad = [], {}
        for t, calls in enumerate(cc.plan):
            for r, (mode, sg) in enumerate(calls):
                priv = graphs.build(cc.family, cc.seed, cc.scale, families=self.gens)
                if mode == "grad":
                    expected_grad[t, r] = pa.grad([priv.root], priv.grad_leaves, [sg],
                                                  allow_unused=True)
                else:
                    pa.backward(priv.root, sg)
                    contrib.append([None if x.grad is None else x.grad.numpy()
                                    for x in priv.leaves])
        return contrib, expected_grad

    def _run_callers(self, cc):
        """Run every caller's calls on its own thread, all starting together: the
        Outcome per (caller, call), or None if a caller thread never returned."""
        barrier = threading.Barrier(len(cc.plan))
        results = {}

        def caller(t):
            try:
                barrier.wait(timeout=30)
            except threading.BrokenBarrierError:
                pass
            for r, (mode, sg) in enumerate(cc.plan[t]):
                c = graphs.build(cc.family, cc.seed, cc.scale, shared=cc.shared,
                                 families=self.gens)
                fn = _caller_call(cc.eng, mode, c, sg)
                results[t, r] = self.guarded(
                    fn, cc.deadline, f"{cc.family} seed={cc.seed} concurrency caller {t}")

        threads = [threading.Thread(target=caller, args=(t,), name=f"stress-caller-{t}",
                                    daemon=True) for t in range(len(cc.plan))]
        for th in threads:
            th.start()
        for th in threads:
            th.join(cc.deadline + self.wd.grace + 5)
        if any(th.is_alive() for th in threads):
            return None
        return results

    # ---- the loop -------------------------------------------------------------------------------
    def unit(self, family, seed, kind):
        steps = [("", self.check_compare)]
        if self.cfg.multi_root > 0:
            steps.append((" multi-root", lambda f, s: multiroot.check_multi_root(self, f, s)))
        if family in self.cfg.create_graph:
            steps.append((" create_graph", lambda f, s: higher.check_create_graph(self, f, s)))
        if self.cfg.threads > 1:
            steps.append((" concurrency", self.check_concurrency))
        if kind:
            steps.append((f" fault {kind}",
                          lambda f, s: faults_mod.run_fault(self, f, s, kind)))
        for what, step in steps:
            if self.stop_reason:
                break
            self.progress.update(f"{family} seed {seed}{what}")
            t0 = time.perf_counter()
            try:
                step(family, seed)
            except Exception as e:  # a bug in the harness or a generator: report, go on
                import traceback
                self.fail("error", family, seed,
                          f"harness error in{what or ' compare'}: {type(e).__name__}: {e}",
                          {"traceback": traceback.format_exc()},
                          fault=kind if what.startswith(" fault") else None)
            name = what.strip() or "compare"
            tm = self.report.timings
            tm[name] = tm.get(name, 0.0) + time.perf_counter() - t0
            t0 = time.perf_counter()  # every BLAS library back to its start
            self.leaks.check_blas(family, seed, f"after the {name} check",
                                  fault=kind if what.startswith(" fault") else None)
            tm["state checks"] = tm.get("state checks", 0.0) + time.perf_counter() - t0
        self.report.units += 1
        t0 = time.perf_counter()
        self.leaks.engine_state(family)
        tm = self.report.timings
        tm["state checks"] = tm.get("state checks", 0.0) + time.perf_counter() - t0

    def schedule(self):
        """Yields (family, seed, fault kind) units until the budget is used up."""
        cfg = self.cfg
        fams, kinds = self.families, list(cfg.faults)
        if cfg.replay is not None:
            for f in fams:
                for k in kinds or [None]:
                    yield f, cfg.replay, k
            return
        n = cfg.iterations
        duration = cfg.duration
        if n is None and duration is None:
            duration = 60.0
        end = None if duration is None else time.monotonic() + duration
        i = 0
        while (n is None or i < n) and (end is None or time.monotonic() < end):
            kind = kinds[i % len(kinds)] if kinds else None
            yield fams[i % len(fams)], cfg.seed * 1_000_000 + i, kind
            i += 1

    def warm_up(self):
        """Start every engine's workers, so the thread baseline includes them."""
        case = graphs.build("random", 1, 0.02)
        for w, v in self.targets(None):
            eng = self.engine(w, v)
            self.guarded(lambda: eng.backward(case.root, case.seed_grad, retain_graph=True),
                         self.cfg.deadline, "warm-up")
        # a graph wide and heavy enough for backward_parallel's cost model to go parallel
        x = pa.tensor(np.ones((32, 128)) * 0.01, requires_grad=True)
        ws = [pa.tensor(np.eye(128) * 0.5) for _ in range(8)]
        for w in sorted(set(self.cfg.workers) | {max(self.cfg.workers)}):
            y = sum((pa.tanh(x @ m) for m in ws[1:]), pa.tanh(x @ ws[0])).sum()
            self.guarded(lambda: pa.backward_parallel(y, num_workers=w), self.cfg.deadline,
                         "warm-up")
        x.grad = None

    def run(self) -> Report:
        cfg = self.cfg
        rep = self.report
        limits = pinned_blas(cfg.blas_threads) if cfg.blas_threads else \
            contextlib.nullcontext()
        switch = sys.getswitchinterval()
        with limits:
            self.leaks.set_blas_baseline()  # the counts every unit must leave behind
            self.wd.start()
            try:
                if cfg.switch_interval:
                    sys.setswitchinterval(cfg.switch_interval)
                self.warm_up()
                self.leaks.check_blas("(warm-up)", None, "after the warm-up")
                self.leaks.set_thread_baseline()
                next_cp = time.monotonic() + self.checkpoint_every
                for family, seed, kind in self.schedule():
                    self.unit(family, seed, kind)
                    if self.stop_reason:
                        rep.stopped_early = self.stop_reason
                        break
                    if time.monotonic() >= next_cp:
                        self.progress.update("leak checkpoint", force=True)
                        t0 = time.perf_counter()
                        self.leaks.checkpoint()
                        tm = rep.timings
                        tm["checkpoints"] = tm.get("checkpoints", 0.0) + time.perf_counter() - t0
                        next_cp = time.monotonic() + self.checkpoint_every
                if not self.stop_reason:
                    self.leaks.checkpoint()
            except KeyboardInterrupt:
                rep.stopped_early = "interrupted (Ctrl+C)"
            finally:
                self.progress.close()
                for key, eng in list(self.engines.items()):
                    self.close_engine(eng, f"engine {key}")
                self.engines.clear()
                self.wd.stop()
                sys.setswitchinterval(switch)
                rep.elapsed = time.time() - rep.start
        if cfg.report_path:
            rep.write_json(cfg.report_path)
        return rep


@dataclasses.dataclass
class _Comparison:
    """One graph's comparison (`Harness.check_compare`) and the sequential results."""
    family: str
    seed: int
    case: graphs.Case
    rng: np.random.Generator
    priors: list
    inputs: list
    twice: bool           # also compare two backward calls into the same leaves
    label: str
    deadline: float
    ref: list | None = None         # leaf grads after one sequential backward
    ref_grad: list | None = None    # sequential grad() results
    ref_twice: list | None = None   # leaf grads after two sequential backward calls

    @property
    def leaves(self):
        return self.case.leaves


@dataclasses.dataclass
class _Concurrency:
    """One concurrency check's set-up (`Harness.check_concurrency`)."""
    family: str
    seed: int
    scale: float
    shared: dict          # the leaf pool every caller's graph is built over
    template: graphs.Case
    eng: object
    plan: list            # per caller: [(mode, seed gradient)] per call
    priors: list
    where: str
    deadline: float

    @property
    def leaves(self):
        return self.template.leaves


def _caller_call(eng, mode, c, sg):
    """A concurrency caller's call on graph `c` with seed gradient `sg`."""
    if mode == "grad":
        return lambda: eng.grad([c.root], c.grad_leaves, [sg], allow_unused=True)
    return lambda: eng.backward(c.root, sg)


def _leaf_sum_problem(j, leaf, prior, terms) -> str | None:
    """What is wrong with shared leaf `j`'s .grad after concurrent calls, given its
    prior and every call's contribution `terms` (summed in an order nobody fixes, so
    compared within a rounding bound), or None."""
    got = None if leaf.grad is None else leaf.grad.numpy()  # the array, for numpy's ufuncs
    if not terms:
        return diff(prior, got, f"leaf {j}")
    if got is None:
        return f"leaf {j}: no gradient after {len(terms)} contributions"
    if got.dtype != leaf.dtype or got.shape != leaf.shape:
        return f"leaf {j}: got {got.dtype}{got.shape}"
    acc = np.zeros(leaf.shape, np.float64) if prior is None else prior.astype(np.float64)
    mag = np.abs(acc)
    for g in terms:
        acc = acc + g
        mag = mag + np.abs(g)
    eps = np.finfo(leaf.dtype).eps
    bound = 2 * (len(terms) + 1) * eps * mag + np.finfo(leaf.dtype).tiny
    err = np.abs(got.astype(np.float64) - acc)
    if np.all(err <= bound):
        return None
    k = int(np.argmax(err - bound))
    lost = _lost_updates(acc - got, terms)
    return (f"leaf {j} {leaf.shape}: sum of {len(terms)} concurrent contributions "
            f"off by {err.flat[k]:.3g} (bound {bound.flat[k]:.3g})"
            + (f" - looks like {lost} lost update(s)" if lost else ""))


def _lost_updates(missing, terms) -> int:
    """How many contributions `missing` (expected - got) is the sum of, or 0."""
    import itertools
    if len(terms) > 10:
        return 0
    for k in range(1, len(terms) + 1):
        for combo in itertools.combinations(terms, k):
            if np.allclose(missing, sum(combo), rtol=1e-6, atol=1e-9):
                return k
    return 0


def run(cfg: Config | None = None, engine_factory=None, families=None, stream=None) -> Report:
    """Run the harness; returns the Report (`.ok`, `.summary()`, `.as_dict()`). It runs
    with float64 as the default dtype (its gradient checks and sums against float64
    references need it; the graphs state float32 where they want it), and puts the
    caller's default back after."""
    before = pa.get_default_dtype()
    pa.set_default_dtype(pa.float64)
    try:
        return Harness(cfg or Config(), engine_factory, families, stream).run()
    finally:
        pa.set_default_dtype(before)
