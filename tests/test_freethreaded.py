"""Free-threaded CPython (3.13t, `make test-ft`): the engine runs with the GIL really off.

CPython silently re-enables the GIL when it loads a C extension that has not declared
free-threading support (it only prints a RuntimeWarning), and the whole point of the ft run
would be lost. These tests fail loudly when that happens. Skipped on a regular build.
"""
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import parallel_autograd as pa
from conftest import assert_bitwise

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

pytestmark = pytest.mark.skipif(not FREE_THREADED,
                                reason="needs a free-threaded CPython build (python3.13t)")


def wide_graph(branches=8, n=50_000):
    """Independent elementwise branches (no BLAS: bitwise comparable), with enough work for
    the cost model to run them in parallel."""
    x = pa.randn(n, seed=0)
    ws = [pa.randn(n, seed=i + 1, requires_grad=True) for i in range(branches)]
    loss = None
    for w in ws:
        h = (x * w).tanh()
        for _ in range(6):
            h = (h * 1.0001 + 0.5).sin().exp()
        loss = h.sum() if loss is None else loss + h.sum()
    return loss, ws


def test_gil_disabled_after_parallel_backward():
    assert os.environ.get("PYTHON_GIL") != "0", \
        "PYTHON_GIL=0 forces the GIL off and would hide an extension that re-enables it"
    loss, ws = wide_graph()
    st = pa.backward_parallel(loss, num_workers=4, stats=True)
    assert all(w.grad is not None for w in ws)
    assert st.mode == "parallel", st.reason
    assert sys._is_gil_enabled() is False


# Every module the package and the test run load, in a fresh interpreter without PYTHON_GIL:
# a RuntimeWarning there names the module that turned the GIL back on.
_CHILD = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("error", RuntimeWarning)
    import numpy, threadpoolctl, pytest, pytest_timeout
    import parallel_autograd as pa
    import parallel_autograd.nn.functional as F
    x = pa.randn(256, 256, seed=0)
    ws = [pa.randn(256, 256, seed=i, requires_grad=True) for i in range(1, 9)]
    loss = sum(F.linear(x, w).tanh().sum() for w in ws)
    pa.backward_parallel(loss, num_workers=4)
    h = x
    for w in ws:
        h = F.layer_norm(F.gelu(h * w), (256,))
    pa.backward_parallel(h.sum(), num_workers=2)
    print("GIL", sys._is_gil_enabled())
""")


def test_gil_stays_disabled_in_fresh_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "GIL False", r.stdout + r.stderr


def test_gradients_match_sequential_without_gil():
    loss, ws = wide_graph()
    pa.backward(loss, retain_graph=True)
    ref = [w.grad.clone() for w in ws]
    for _ in range(5):
        for w in ws:
            w.grad = None
        pa.backward_parallel(loss, num_workers=4, retain_graph=True)
        assert_bitwise(ref, [w.grad for w in ws])
