"""Float64 scientific rows (issue 28, item 4): gradient, Jacobian, Hessian and
Hessian-vector product of small tanh networks, ours against PyTorch, JAX and HIPS
autograd, each library in its own child process.

Rows (`ROWS`, sizes full / quick / tiny):

- `sci-grad`: the gradient of a 4-layer 512-wide tanh MLP (batch 256, loss sum(h*h))
  with respect to its 8 parameters: `pa.grad`, `torch.autograd.grad`, `jax.grad`,
  `autograd.grad`;
- `sci-hessian`: the Hessian of a 256-input scalar function w . tanh(W2 tanh(W1 x + b1)
  + b2) (hidden 256): `pa.autograd.functional.hessian`,
  `torch.autograd.functional.hessian` (vectorize=False and True), `jax.hessian`,
  `autograd.hessian`;
- `sci-jacobian`: the Jacobian of the 64 -> 256 -> 64 function tanh(W2 tanh(W1 x + b1)
  + b2): `...functional.jacobian` (torch: vectorize=False and True), `jax.jacrev`,
  `autograd.jacobian`;
- `sci-hvp`: the Hessian-vector product of `sci-hessian`'s function: `...functional.hvp`,
  `jax.jvp(jax.grad(f))`, `autograd.hessian_vector_product`.

Every library gets bitwise the same float64 arrays (seeded numpy). JAX runs with x64
enabled, every function `jax.jit`-compiled, on the CPU, results waited for
(`block_until_ready`); the compilation happens in the warm-up. Threads: the child runs
on the usable cores (`usable_cores()`; its CPU affinity is the parent's); torch gets
`set_num_threads(cores)`; XLA sizes its pool from the CPU affinity (with one core,
`XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`); numpy's
BLAS (ours and HIPS autograd) is left at its default, the usable cores. The threads each
child had are recorded.

A child (`python -m stress.compare.scientific --child LIB ...`) times every row and
variant interleaved: warm-up calls, then `--reps` rounds, the order rotated each round;
a round's sample is the mean of `inner` calls (enough for >= 20 ms, calibrated in the
warm-up). It writes its raw JSON and the last call's results (`.npz`); the parent
(`run`) starts one child per installed library, rotated, and prints the largest
difference of each library's result from ours relative to the largest element of ours
(so the times compare equal work). Ratios ours / theirs have 95% bootstrap intervals
(independent processes, `stats`).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

LIBS = ("pa", "torch", "jax", "autograd")  # ours first: every ratio is ours / theirs
MODULES = {"torch": "torch", "jax": "jax", "autograd": "autograd"}  # what must import
LABELS = {"pa": "ours", "torch": "PyTorch", "torch-vec": "PyTorch (vectorize=True)",
          "jax": "JAX (jit, x64)", "autograd": "HIPS autograd"}
ROWS = {
    # name: (description, {size: dims})
    "sci-grad": ("gradient of a 4-layer 512-wide tanh MLP, batch 256, w.r.t. its 8 "
                 "parameters",
                 {"full": dict(batch=256, width=512, layers=4),
                  "quick": dict(batch=64, width=256, layers=4),
                  "tiny": dict(batch=3, width=4, layers=2)}),
    "sci-hessian": ("Hessian of a 256-input tanh-MLP scalar function (hidden 256)",
                    {"full": dict(n=256, hidden=256), "quick": dict(n=64, hidden=64),
                     "tiny": dict(n=4, hidden=3)}),
    "sci-jacobian": ("Jacobian of a 64 -> 256 -> 64 tanh-MLP function",
                     {"full": dict(n=64, hidden=256), "quick": dict(n=32, hidden=64),
                      "tiny": dict(n=3, hidden=4)}),
    "sci-hvp": ("Hessian-vector product of the 256-input tanh-MLP scalar function",
                {"full": dict(n=256, hidden=256), "quick": dict(n=64, hidden=64),
                 "tiny": dict(n=4, hidden=3)}),
}
MIN_SAMPLE = 0.02  # seconds: a round's sample is at least this many calls' worth
WARMUP = 2


def available(lib: str) -> bool:
    """Whether `lib`'s column can be measured: ours always; the others when their
    package is installed (found without importing it here)."""
    return lib == "pa" or importlib.util.find_spec(MODULES[lib]) is not None


# ---- the data, bitwise the same for every library -----------------------------------------
def row_data(name: str, size: str, seed: int) -> dict:
    """Row `name`'s float64 arrays at `size`, seeded from `seed` and the row's name."""
    import zlib
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    d = ROWS[name][1][size]
    if name == "sci-grad":
        w = d["width"]
        params = []
        for _ in range(d["layers"]):
            params += [rng.standard_normal((w, w)) / np.sqrt(w), rng.uniform(-0.1, 0.1, w)]
        return {"x": rng.standard_normal((d["batch"], w)), "params": params}
    n, h = d["n"], d["hidden"]
    out = n if name == "sci-jacobian" else h
    return {"x": rng.standard_normal(n), "v": rng.standard_normal(n),
            "W1": rng.standard_normal((h, n)) / np.sqrt(n), "b1": rng.uniform(-0.1, 0.1, h),
            "W2": rng.standard_normal((out, h)) / np.sqrt(h),
            "b2": rng.uniform(-0.1, 0.1, out), "w": rng.standard_normal(out) / np.sqrt(out)}


def _mlp_loss(tanh, total):
    def loss(params, x):
        h = x
        for i in range(0, len(params), 2):
            h = tanh(h @ params[i] + params[i + 1])
        return total(h * h)
    return loss


def _two_layer(tanh, c):
    """x -> tanh(W2 tanh(W1 x + b1) + b2), the weights `c` constants of the library."""
    return lambda x: tanh(c["W2"] @ tanh(c["W1"] @ x + c["b1"]) + c["b2"])


def _scalar(tanh, total, c):
    layer = _two_layer(tanh, c)
    return lambda x: total(c["w"] * layer(x))


# ---- each library's calls: {variant: fn}, fn() -> the result (computed, waited for) -------
def _pa_calls(name: str, d: dict) -> dict:
    import parallel_autograd as pa
    from parallel_autograd.autograd import functional as AF
    if name == "sci-grad":
        params = [pa.Tensor(a, requires_grad=True, dtype=np.float64) for a in d["params"]]
        x, loss = pa.from_numpy(d["x"]), _mlp_loss(pa.tanh, pa.sum)
        return {"pa": lambda: pa.grad(loss(params, x), params)}
    c = {k: pa.from_numpy(v) for k, v in d.items()}
    x, v = c["x"], c["v"]
    if name == "sci-jacobian":
        f = _two_layer(pa.tanh, c)
        return {"pa": lambda: AF.jacobian(f, x)}
    f = _scalar(pa.tanh, pa.sum, c)
    if name == "sci-hessian":
        return {"pa": lambda: AF.hessian(f, x)}
    return {"pa": lambda: AF.hvp(f, x, v)[1]}


def _torch_calls(name: str, d: dict) -> dict:
    import torch
    from torch.autograd import functional as TF
    if name == "sci-grad":
        params = [torch.from_numpy(a.copy()).requires_grad_(True) for a in d["params"]]
        x, loss = torch.from_numpy(d["x"]), _mlp_loss(torch.tanh, torch.sum)
        return {"torch": lambda: torch.autograd.grad(loss(params, x), params)}
    c = {k: torch.from_numpy(v) for k, v in d.items()}
    x, v = c["x"], c["v"]
    if name == "sci-hvp":
        f = _scalar(torch.tanh, torch.sum, c)
        return {"torch": lambda: TF.hvp(f, x, v)[1]}
    if name == "sci-jacobian":
        f, op = _two_layer(torch.tanh, c), TF.jacobian
    else:
        f, op = _scalar(torch.tanh, torch.sum, c), TF.hessian
    return {"torch": lambda: op(f, x), "torch-vec": lambda: op(f, x, vectorize=True)}


def _jax_calls(name: str, d: dict) -> dict:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    wait = jax.block_until_ready
    if name == "sci-grad":
        params = [jnp.asarray(a) for a in d["params"]]
        x = jnp.asarray(d["x"])
        g = jax.jit(jax.grad(_mlp_loss(jnp.tanh, jnp.sum)))
        return {"jax": lambda: wait(g(params, x))}
    c = {k: jnp.asarray(v) for k, v in d.items()}
    x, v = c["x"], c["v"]
    if name == "sci-jacobian":
        fn = jax.jit(jax.jacrev(_two_layer(jnp.tanh, c)))
        return {"jax": lambda: wait(fn(x))}
    f = _scalar(jnp.tanh, jnp.sum, c)
    if name == "sci-hessian":
        fn = jax.jit(jax.hessian(f))
        return {"jax": lambda: wait(fn(x))}
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
    return {"jax": lambda: wait(hvp(x, v))}


def _autograd_calls(name: str, d: dict) -> dict:
    import autograd
    import autograd.numpy as anp
    if name == "sci-grad":
        g = autograd.grad(_mlp_loss(anp.tanh, anp.sum))
        return {"autograd": lambda: g(list(d["params"]), d["x"])}
    x, v = d["x"], d["v"]
    if name == "sci-jacobian":
        fn = autograd.jacobian(_two_layer(anp.tanh, d))
        return {"autograd": lambda: fn(x)}
    f = _scalar(anp.tanh, anp.sum, d)
    if name == "sci-hessian":
        fn = autograd.hessian(f)
        return {"autograd": lambda: fn(x)}
    hvp = autograd.hessian_vector_product(f)
    return {"autograd": lambda: hvp(x, v)}


CALLS = {"pa": _pa_calls, "torch": _torch_calls, "jax": _jax_calls,
         "autograd": _autograd_calls}


def as_arrays(result) -> list:
    """A call's result (a tensor, an array or a list of them) as float64 numpy arrays."""
    items = result if isinstance(result, (list, tuple)) else [result]
    out = []
    for r in items:
        r = r.detach() if hasattr(r, "detach") else r
        out.append(np.asarray(r.numpy() if hasattr(r, "numpy") else r, dtype=np.float64))
    return out


# ---- the child: one library, every selected row ------------------------------------------
def _setup_threads(lib: str, cores: int) -> None:
    """The thread count of the library before it is imported (see the module docstring)."""
    if lib == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        if cores == 1:
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_"
                                       "thread_eigen=false intra_op_parallelism_threads=1")
    if lib == "torch":
        import torch
        torch.set_num_threads(cores)


def _calibrate(fn) -> int:
    """Calls per sample: enough for MIN_SAMPLE seconds (after the warm-up calls)."""
    for _ in range(WARMUP):  # JAX compiles here; caches, pools and BLAS threads start
        fn()
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-6)
    return max(1, min(100, int(MIN_SAMPLE / one + 0.999)))


def _sample(fn, inner: int) -> float:
    import gc
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t) / inner
    finally:
        gc.enable()


def measure(lib: str, rows: list, size: str, reps: int, seed: int) -> tuple:
    """Time `lib` on `rows`: (raw JSON, {"row/variant": result arrays})."""
    from parallel_autograd.engine.cost import usable_cores

    from .machine import Contention
    cores = usable_cores()
    _setup_threads(lib, cores)
    fns, arrays = {}, {}
    for name in rows:
        for variant, fn in CALLS[lib](name, row_data(name, size, seed)).items():
            fns[(name, variant)] = fn
    inner = {k: _calibrate(fn) for k, fn in fns.items()}
    samples = {k: [] for k in fns}
    meter = Contention()
    keys = list(fns)
    for r in range(reps):
        k0 = r % len(keys)
        for k in keys[k0:] + keys[:k0]:
            samples[k].append(_sample(fns[k], inner[k]))
    for (name, variant), fn in fns.items():
        for i, a in enumerate(as_arrays(fn())):
            arrays[f"{name}/{variant}/{i}"] = a
    raw = {"lib": lib, "cores": cores, "threads": len(os.listdir("/proc/self/task"))
           if os.path.isdir("/proc/self/task") else None,
           "version": _version(lib), "size": size, "reps": reps, "seed": seed,
           "contention": meter.cores(), "rows": {}}
    for (name, variant), s in samples.items():
        raw["rows"].setdefault(name, {})[variant] = {"times": s, "inner": inner[(name, variant)]}
    return raw, arrays


def _version(lib: str):
    if lib == "pa":
        import parallel_autograd as pa
        return pa.__version__
    from importlib.metadata import version
    return version(MODULES[lib])


def child_main(argv=None) -> int:
    """`python -m stress.compare.scientific --child LIB ...`: measure, write JSON + npz."""
    p = argparse.ArgumentParser(prog="python -m stress.compare.scientific")
    p.add_argument("--child", choices=LIBS, required=True)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--size", choices=("full", "quick", "tiny"), default="full")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--raw-out", required=True)
    p.add_argument("--arrays-out", required=True)
    a = p.parse_args(argv)
    rows = [r for r in a.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    raw, arrays = measure(a.child, rows, a.size, a.reps, a.seed)
    with open(a.raw_out, "w") as f:
        json.dump(raw, f)
    np.savez(a.arrays_out, **arrays)
    return 0



# ---- the parent: one child per installed library --------------------------------------------
def run_child(lib: str, rows: list, size: str, reps: int, seed: int) -> tuple:
    """Library `lib` measured in a fresh child: (raw JSON, result arrays)."""
    from .children import ROOT, child_env
    paths = []
    for suffix in (".json", ".npz"):
        fd, path = tempfile.mkstemp(suffix=suffix, prefix=f"compare-sci-{lib}-")
        os.close(fd)
        paths.append(path)
    cmd = [sys.executable, "-m", "stress.compare.scientific", "--child", lib,
           "--rows", ",".join(rows), "--size", size, "--reps", str(reps),
           "--seed", str(seed), "--raw-out", paths[0], "--arrays-out", paths[1]]
    try:
        subprocess.run(cmd, env=child_env(False), check=True, cwd=ROOT)
        with open(paths[0]) as f:
            raw = json.load(f)
        with np.load(paths[1]) as z:
            arrays = {k: z[k] for k in z.files}
        return raw, arrays
    finally:
        for path in paths:
            os.unlink(path)


def agreement(ours: dict, theirs: dict, name: str, variant: str):
    """max |theirs - ours| / max |ours| over the result's arrays (None: not comparable)."""
    worst = 0.0
    i = 0
    while f"{name}/pa/{i}" in ours:
        a, b = ours[f"{name}/pa/{i}"], theirs.get(f"{name}/{variant}/{i}")
        if b is None or a.size != b.size:
            return None
        worst = max(worst, float(np.max(np.abs(b.reshape(a.shape) - a), initial=0.0))
                    / max(float(np.max(np.abs(a), initial=0.0)), 1e-300))
        i += 1
    return worst


def run(rows: list, size: str, reps: int, seed: int, log, libs=None) -> dict:
    """Every library of `libs` (default: ours and the installed ones) in its own child,
    the order rotated by the seed; a library whose child fails is left out (said)."""
    libs = [lib for lib in (libs or LIBS) if available(lib)]
    measured, arrays = {}, {}
    order = libs[seed % len(libs):] + libs[:seed % len(libs)]
    for lib in order:
        log(f"[scientific] {LABELS[lib]}: {', '.join(rows)}")
        try:
            measured[lib], arrays[lib] = run_child(lib, rows, size, reps, seed)
        except subprocess.CalledProcessError:
            if lib == "pa":
                raise
            log(f"[scientific] the {LABELS[lib]} child failed (installed but not "
                "importable?): no column")
    if "pa" not in measured:
        return {"libs": {}, "agreement": {}}
    agree = {f"{name}/{variant}": agreement(arrays["pa"], arrays[lib], name, variant)
             for lib, raw in measured.items() if lib != "pa"
             for name, variants in raw["rows"].items() for variant in variants}
    return {"libs": {lib: measured[lib] for lib in libs if lib in measured},
            "agreement": agree, "rows": rows,
            "missing": [lib for lib in LIBS if lib not in measured]}


# ---- ratios, the report's section and the target -------------------------------------------
def ratio(sci: dict, name: str, variant: str):
    """Ours / `variant`'s time on row `name` (two processes: independent resamples)."""
    from .stats import ratio_interval, seed_for
    lib = variant.split("-")[0]
    ours = sci["libs"]["pa"]["rows"][name]["pa"]["times"]
    theirs = sci["libs"][lib]["rows"][name][variant]["times"]
    return ratio_interval(ours, theirs, seed_for(sci["libs"]["pa"]["seed"], "scientific",
                                                 name, variant), False)


def _noisy(sci: dict, lib: str, limit) -> bool:
    from .samples import is_noisy
    return any(is_noisy(sci["libs"][x]["contention"], limit) for x in ("pa", lib))


VARIANTS = ("torch", "torch-vec", "jax", "autograd")  # the columns' order


def _variants(sci: dict, name: str) -> list:
    found = {v for lib, raw in sci["libs"].items() if lib != "pa"
             for v in raw["rows"].get(name, {})}
    return [v for v in VARIANTS if v in found]


def table(sci: dict) -> str:
    """One line per row: ours (ms), then per other library and variant its time and
    ours / its with the interval, and the largest relative difference of its result."""
    import statistics

    from .report import markdown, ms
    from .stats import ratio_text
    variants = list(dict.fromkeys(v for n in sci["rows"] for v in _variants(sci, n)))
    head = ["row", "ours ms"] + [f"{LABELS[v]}: ms, ours / it" for v in variants] + \
        ["largest relative difference from ours"]
    rows = []
    for n in sci["rows"]:
        row = [n, ms(statistics.median(sci["libs"]["pa"]["rows"][n]["pa"]["times"]))]
        for v in variants:
            r = sci["libs"][v.split("-")[0]]["rows"].get(n, {}).get(v)
            row.append("n/a" if r is None else
                       f"{ms(statistics.median(r['times']))}: {ratio_text(ratio(sci, n, v))}")
        diffs = [sci["agreement"].get(f"{n}/{v}") for v in variants]
        row.append(f"{max((d for d in diffs if d is not None), default=0.0):.1e}")
        rows.append(row)
    return markdown(head, rows)


def section(sci) -> list:
    """`## Float64 scientific work ...` as lines (none when the rows were not run)."""
    from .report import cores_text
    if not sci or not sci.get("libs"):
        return []
    libs = sci["libs"]
    how = "; ".join(f"{LABELS[lib]} {raw['version']} ({raw['threads']} threads in its "
                    f"process, other load {cores_text(raw['contention'])})"
                    for lib, raw in libs.items())
    missing = [LABELS[lib] for lib in sci.get("missing", []) if lib != "pa"]
    lines = ["## Float64 scientific work: ours against PyTorch, JAX and HIPS autograd", "",
             f"Each library alone in its own process on {libs['pa']['cores']} cores, medians "
             f"of {libs['pa']['reps']} rounds after a warm-up (JAX: jit-compiled, x64); "
             f"{how}. `ours / it` below 1: we are faster. The last column: the largest "
             "difference of any library's result from ours, relative to ours' largest "
             "element (all compute the same numbers).", "", table(sci), ""]
    if missing:
        lines += [f"Not installed (no column): {', '.join(missing)}; `pip install "
                  "'parallel_autograd[scientific]'` installs JAX and HIPS autograd.", ""]
    return lines


def evaluate_target(sci, noisy_limit) -> dict:
    """Target 13: ours faster than JAX and HIPS autograd on every row (unresolved while
    either is not installed, or a row was measured under other load)."""
    from .stats import MISS, PASS, UNRESOLVED
    from .targets import all_of, check, target
    text = "float64 scientific: faster than JAX and HIPS autograd on every row"
    if not sci or not sci.get("libs"):
        return target(13, text, None, "not run")
    checks = [check(f"{n} vs {LABELS[lib]}", ratio(sci, n, lib), "<", 1.0,
                    _noisy(sci, lib, noisy_limit))
              for lib in ("jax", "autograd") if lib in sci["libs"] for n in sci["rows"]]
    absent = [LABELS[lib] for lib in ("jax", "autograd") if lib not in sci["libs"]]
    if not checks:
        return dict(target(13, text, None, ""), status=UNRESOLVED,
                    detail="neither is installed (pip install 'parallel_autograd[scientific]')")
    t = all_of(13, text, checks, "ours / theirs")
    if absent and t["status"] != MISS:
        t = dict(t, status=UNRESOLVED, detail=t["detail"] + f"; not installed: "
                 f"{', '.join(absent)}")
    return dict(t, recheck=[]) if t["status"] in (PASS, MISS) else t

if __name__ == "__main__":
    sys.exit(child_main())
