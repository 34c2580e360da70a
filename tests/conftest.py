"""Make the package importable when pytest runs from a source checkout, and the one
bitwise comparison the tests use (`from conftest import assert_bitwise`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_bitwise(want, got, what="gradient"):
    """Each array in `got` has the dtype, shape and bytes of the one at the same place
    in `want` (None where `want` has None), and there are as many. Bytes, not values:
    +0.0 and -0.0, or NaNs with different payloads, differ. It is the stress harness's
    comparison (`stress.checks.diff`)."""
    from stress.checks import diff_all  # on use: importing conftest imports no package

    problems = diff_all(want, got, what)
    assert not problems, "\n".join(problems)


def temporary_bytes(fn, *args, **kwargs):
    """Call `fn(*args, **kwargs)` under tracemalloc (numpy reports its buffers to it) and
    return `(result, extra)`: `extra` is the peak of bytes allocated during the call minus
    the bytes of the arrays in the result that the call allocated (they are still held at
    the end). A rule or op that allocates no more than it returns has `extra` near 0 (a few
    hundred bytes of Python objects); each full-size temporary adds its size.

    The caching allocator is off during the call: a reused block is no allocation, so
    with it on a wasteful rule could look lean."""
    import tracemalloc

    import numpy as np

    from parallel_autograd import memory

    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    was_caching = memory.set_enabled(False)
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn(*args, **kwargs)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        memory.set_enabled(was_caching)
        if not was_tracing:
            tracemalloc.stop()
    items = result if isinstance(result, (tuple, list)) else (result,)
    arrays = [a if isinstance(a, np.ndarray) else getattr(a, "data", None) for a in items]
    held = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
    return result, peak - base - min(held, current - base)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _grad_mode_left_enabled():
    """Every test must leave this thread's grad mode on (a test that does not would
    break the tests after it): fail the culprit, then put it back."""
    yield
    from parallel_autograd.grad_mode import is_grad_enabled, set_mode
    if not is_grad_enabled():
        set_mode(True)
        pytest.fail("the test left grad mode disabled on the main thread")


def pytest_configure(config):
    """`PA_REQUIRE_TORCH=1` (set by `make test PARITY=1`, which CI runs): the PyTorch
    parity tests must run, so a torch that fails to import stops the session instead of
    turning a quarter of the suite into skips."""
    if os.environ.get("PA_REQUIRE_TORCH") == "1":
        try:
            import torch  # noqa: F401
        except Exception as e:  # noqa: BLE001  (any import failure counts)
            raise pytest.UsageError(
                f"PA_REQUIRE_TORCH=1 but torch does not import ({e!r}): the parity tests "
                f"would all skip; install the [parity] extra") from e
