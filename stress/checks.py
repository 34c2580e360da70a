"""Small shared helpers: gradient comparison, priors, engine wrappers, call outcomes."""
from __future__ import annotations

import numpy as np

import parallel_autograd as pa

VARIANTS = ("queue", "inline", "shared", "default")


class DefaultEngine:
    """`pa.backward_parallel` / `pa.grad_parallel`: the process-wide engines with their
    default cost model (small graphs fall back to the sequential code)."""

    def __init__(self, num_workers):
        self.num_workers = num_workers

    def backward(self, root, grad=None, retain_graph=False):
        return pa.backward_parallel(root, grad, num_workers=self.num_workers,
                                    retain_graph=retain_graph)

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=False,
             allow_unused=False):
        return pa.grad_parallel(outputs, inputs, grad_outputs, retain_graph, allow_unused,
                                num_workers=self.num_workers)

    def close(self):
        pass

    @property
    def inner(self):
        return pa.default_engine(self.num_workers)


def default_engine_factory(num_workers: int, variant: str):
    """The engines the harness checks. `queue`: every node through the shared queue
    (thresholds 0, inline_below=0: ranked accumulation); `inline`: parallel always,
    nodes under 16 elements inline; `shared`: every node of these small graphs cheap
    (keyed accumulation) and handed between threads (`share_cheap`) on any build; `default`: backward_parallel as users call it."""
    if variant == "queue":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, inline_below=0)
    if variant == "inline":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, inline_below=16)
    if variant == "shared":
        return pa.Engine(num_workers, min_nodes=0, min_work=0, min_width=0, share_cheap=True)
    if variant == "default":
        return DefaultEngine(num_workers)
    raise ValueError(f"unknown engine variant {variant!r} (known: {', '.join(VARIANTS)})")


def underlying(engine):
    """The pa.Engine behind a harness engine (or None if it is something else)."""
    inner = getattr(engine, "inner", engine)
    return inner if isinstance(inner, pa.Engine) else None


def diff(ref, got, what: str):
    """None if `got` is bitwise `ref` (NaN-aware), else a description."""
    if ref is None and got is None:
        return None
    if ref is None or got is None:
        return (f"{what}: expected {'no gradient' if ref is None else 'a gradient'}, got "
                f"{'None' if got is None else f'an array {got.shape}'}")
    ref = np.asarray(ref)
    got = np.asarray(got)
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return f"{what}: expected {ref.dtype}{ref.shape}, got {got.dtype}{got.shape}"
    if not np.array_equal(ref, got, equal_nan=ref.dtype.kind in "fc"):
        bad = ~((ref == got) | (np.isnan(ref) & np.isnan(got)))
        with np.errstate(invalid="ignore"):
            err = np.nanmax(np.abs(ref - got)) if bad.any() else 0.0
        return (f"{what}: {int(bad.sum())}/{ref.size} elements differ "
                f"(max abs diff {err:.3g})")
    if np.ascontiguousarray(ref).tobytes() != np.ascontiguousarray(got).tobytes():
        return f"{what}: equal values but different bits (signed zeros or NaN payloads)"
    return None


def diff_all(refs, gots, what) -> list:
    """`diff` of each pair of `refs` and `gots` (item `j` named `what(j)`, or
    f"{what} {j}" when `what` is a string), plus a line if the counts differ: the
    problems found, none if every array is bitwise its reference."""
    name = what if callable(what) else (lambda j: f"{what} {j}")
    refs, gots = list(refs), list(gots)
    problems = [d for d in (diff(r, g, name(j)) for j, (r, g) in enumerate(zip(refs, gots)))
                if d]
    if len(refs) != len(gots):
        problems.append(f"{len(gots)} results for {len(refs)} expected")
    return problems


def leaf_diffs(refs, leaves) -> list:
    """`diff_all` of reference gradients against the leaves' `.grad`, each named by
    index, shape and dtype."""
    return diff_all(refs, [t.grad for t in leaves],
                    lambda j: f"leaf {j} {leaves[j].shape} {leaves[j].dtype}")


def make_priors(leaves, rng, p_none: float = 0.5):
    """Per leaf: None, or an array already in .grad before the call (tests +=)."""
    out = []
    for t in leaves:
        if not t.requires_grad or rng.random() < p_none:
            out.append(None)
        else:
            out.append(np.asarray(rng.standard_normal(t.shape), dtype=t.dtype))
    return out


def set_grads(leaves, priors):
    for t, p in zip(leaves, priors):
        t.grad = None if p is None else p.copy()


def unchanged(leaves, before_objs, before_vals):
    """Problems if any .grad is no longer the same object with the same bits."""
    problems = []
    for i, (t, obj, val) in enumerate(zip(leaves, before_objs, before_vals)):
        if t.grad is not obj:
            problems.append(f"leaf {i} {t.shape}: .grad was replaced by a failed call")
        elif val is not None:
            d = diff(val, t.grad, f"leaf {i}")
            if d:
                problems.append(d + " (modified by a failed call)")
    return problems


def snapshot(leaves):
    objs = [t.grad for t in leaves]
    vals = [None if g is None else g.copy() for g in objs]
    return objs, vals


class Outcome:
    """What one guarded call did."""

    __slots__ = ("value", "exc", "hang", "broken", "dump", "elapsed")

    def __init__(self):
        self.value = None
        self.exc = None
        self.hang = False      # the watchdog fired (deadline missed)
        self.broken = False    # ... and its HangDetected ended the call
        self.dump = None
        self.elapsed = 0.0

    def describe(self):
        if self.hang:
            return "hang"
        if self.exc is not None:
            return f"{type(self.exc).__name__}: {self.exc}"
        return "ok"
