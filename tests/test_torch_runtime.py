"""PyTorch's device model and process settings under pa (issue 27): pa.device, x.device,
.cuda()/.to(device) errors, Module.to(device), pa.cuda, pa.backends, threads,
determinism flags, inference_mode, Tensor.__format__ -- compared with torch (a CPU build)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import parallel_autograd as pa
from parallel_autograd import intraop
from parallel_autograd.device import DeviceUnavailableError
from parallel_autograd.engine import blas
from parallel_autograd.engine.engine import default_engine, set_default_num_workers

torch = pytest.importorskip("torch")


def outcome(fn):
    """('ok', value) or ('raise', exception types torch-relevant) of fn()."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001  (compared, not swallowed)
        return "raise", e


# ---- pa.device -----------------------------------------------------------------------------------
DEVICE_ARGS = [("cpu",), ("cpu:0",), ("cpu", 0), ("cuda",), ("cuda:1",), ("cuda", 2), ("mps",),
               ("cpu", None), ("CPU",), ("cpu:-1",), ("cpu", -1), ("cuda:x",), ("foo",),
               ("cpu:0", 1), (1.5,), ("cpu:01",)]


@pytest.mark.parametrize("args", DEVICE_ARGS, ids=[repr(a) for a in DEVICE_ARGS])
def test_device_construction_matches_torch(args):
    kind, got = outcome(lambda: pa.device(*args))
    tkind, want = outcome(lambda: torch.device(*args))
    assert kind == tkind, (got, want)
    if kind == "ok":
        assert (got.type, got.index, str(got), repr(got)) == \
            (want.type, want.index, str(want), repr(want))
    else:
        assert type(got) is type(want), (got, want)


def test_device_equality_hash_and_pickle():
    import pickle
    cpu = pa.device("cpu")
    assert cpu == pa.device("cpu") and cpu != pa.device("cpu", 0)   # as torch's
    assert cpu == torch.device("cpu") and pa.device("cuda:1") == torch.device("cuda", 1)
    assert pa.device(torch.device("cpu:0")) == pa.device("cpu:0")
    assert pa.device(cpu) is not cpu and pa.device(cpu) == cpu
    # deliberate difference: equal to its string (torch: False), and hashed like it
    assert cpu == "cpu" and pa.device("cpu:0") == "cpu:0" and cpu != "cuda"
    assert {cpu: 1}["cpu"] == 1 and hash(pa.device("cpu:0")) == hash("cpu:0")
    assert pickle.loads(pickle.dumps(pa.device("cuda:1"))) == pa.device("cuda:1")
    with pytest.raises(AttributeError):
        cpu.type = "cuda"


def test_tensor_device_attributes():
    x = pa.ones(2)
    t = torch.ones(2)
    assert x.device == pa.device("cpu") and str(x.device) == str(t.device)
    assert (x.is_cuda, x.is_cpu, x.is_meta) == (t.is_cuda, t.is_cpu, t.is_meta)
    assert x.cpu() is x
    for target in ("cpu", "cpu:0", pa.device("cpu"), torch.device("cpu")):
        assert x.to(target) is x
        assert x.to(target, pa.float32).dtype == np.float32


CUDA_CALLS = {
    "tensor_cuda": lambda m: m.ones(2).cuda(),
    "to_cuda": lambda m: m.ones(2).to("cuda"),
    "to_cuda_device": lambda m: m.ones(2).to(m.device("cuda:0")),
    "to_cuda_kw": lambda m: m.ones(2).to(device="cuda"),
    "zeros_cuda": lambda m: m.zeros(2, device="cuda"),
    "tensor_cuda_device": lambda m: m.tensor([1.0], device="cuda"),
    "rand_cuda": lambda m: m.rand(2, device=m.device("cuda", 0)),
    "module_cuda": lambda m: m.nn.Linear(2, 2).cuda(),
    "module_to_cuda": lambda m: m.nn.Linear(2, 2).to("cuda"),
    "module_to_cuda_device": lambda m: m.nn.Linear(2, 2).to(m.device("cuda")),
    "cuda_synchronize": lambda m: m.cuda.synchronize(),
    "cuda_current_device": lambda m: m.cuda.current_device(),
    "cuda_name": lambda m: m.cuda.get_device_name(),
    "cuda_init": lambda m: m.cuda.init(),
    "cuda_rng_state": lambda m: m.cuda.get_rng_state(),
}


@pytest.mark.parametrize("name", sorted(CUDA_CALLS))
def test_cuda_use_raises_as_torch_without_cuda(name):
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        CUDA_CALLS[name](torch)
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled") as e:
        CUDA_CALLS[name](pa)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, DeviceUnavailableError)


def test_other_devices_and_bad_device_strings():
    with pytest.raises(RuntimeError, match="mps"):
        pa.ones(2).to("mps")
    with pytest.raises(RuntimeError, match="mps"):
        torch.ones(2).to("mps")
    with pytest.raises(RuntimeError, match="Expected one of"):
        pa.zeros(2, device="gpu")
    with pytest.raises(RuntimeError, match="Expected one of"):
        torch.zeros(2, device="gpu")


CUDA_QUERIES = ["is_available", "device_count", "is_initialized", "is_bf16_supported",
                "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
                "seed", "seed_all"]


@pytest.mark.parametrize("name", CUDA_QUERIES)
def test_cuda_queries_match_torch(name):
    assert getattr(pa.cuda, name)() == getattr(torch.cuda, name)()


def test_cuda_seeding_is_accepted_and_does_nothing():
    pa.manual_seed(3)
    a = pa.rand(2)
    pa.manual_seed(3)
    assert pa.cuda.manual_seed(5) is None and pa.cuda.manual_seed_all(5) is None
    np.testing.assert_array_equal(pa.rand(2).numpy(), a.numpy())


def test_backends_flags_as_torch():
    cudnn, tc = pa.backends.cudnn, torch.backends.cudnn
    assert (cudnn.benchmark, cudnn.deterministic, cudnn.enabled, cudnn.allow_tf32) == \
        (False, False, True, True)
    assert cudnn.is_available() == tc.is_available() and cudnn.version() == tc.version()
    assert pa.backends.mps.is_available() == torch.backends.mps.is_available() is False
    assert pa.backends.mps.is_built() is False and pa.backends.cuda.is_built() is False
    assert pa.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    try:
        cudnn.benchmark = True
        cudnn.deterministic = True
        pa.backends.cuda.matmul.allow_tf32 = True
        assert cudnn.benchmark and cudnn.deterministic and pa.backends.cuda.matmul.allow_tf32
        x = pa.ones(2, requires_grad=True)
        (x * x).sum().backward()                    # no effect on anything
        np.testing.assert_array_equal(x.grad, [2.0, 2.0])
    finally:
        cudnn.benchmark = cudnn.deterministic = False
        pa.backends.cuda.matmul.allow_tf32 = False


# ---- Module.to ----------------------------------------------------------------------------------
def test_module_to_forms():
    m = pa.nn.Linear(2, 3)
    w = m.weight
    assert m.to("cpu") is m and m.to(pa.device("cpu")) is m and m.to(torch.device("cpu")) is m
    assert m.cpu() is m
    assert m.to(pa.float32) is m and m.weight is w and w.dtype == np.float32
    m.to("cpu", pa.float64)
    assert w.dtype == np.float64
    m.to(device="cpu", dtype=pa.float16)
    assert w.dtype == np.float16
    m.to(pa.ones(1, dtype=pa.float32))
    assert w.dtype == np.float32
    m.to("float64", non_blocking=True)
    assert w.dtype == np.float64
    assert m.half() is m and w.dtype == np.float16
    with pytest.raises(TypeError, match="floating point"):
        m.to(pa.int64)
    with pytest.raises(TypeError, match="floating point"):
        torch.nn.Linear(2, 2).to(torch.int64)
    with pytest.raises(TypeError, match="unexpected keyword"):
        m.to(devic="cpu")


def test_layers_taking_device_accept_cpu_objects():
    for dev in ("cpu", pa.device("cpu"), torch.device("cpu")):
        pa.nn.LSTM(2, 3, device=dev)
        pa.nn.MultiheadAttention(4, 2, device=dev)
    with pytest.raises(AssertionError, match="CUDA"):
        pa.nn.GRU(2, 3, device="cuda")


# ---- threads ------------------------------------------------------------------------------------
@pytest.fixture
def restore_threads():
    before_intra = intraop.get_num_threads()
    before_blas = blas.current_threads()
    yield
    intraop.set_num_threads(before_intra)
    if before_blas is not None:
        blas.set_threads(before_blas)
    set_default_num_workers(None)


def test_set_num_threads_sets_intraop_and_blas(restore_threads):
    assert pa.set_num_threads(1) is None
    assert pa.get_num_threads() == 1 and intraop.get_num_threads() == 1
    if blas.current_threads() is not None:
        assert blas.current_threads() == 1
    pa.set_num_threads(2)
    assert pa.get_num_threads() == 2
    if blas.current_threads() is not None:
        assert blas.current_threads() == min(2, blas.available_threads())


def test_set_num_threads_while_a_parallel_call_holds_a_blas_limit(restore_threads):
    if blas.current_threads() is None:
        pytest.skip("no BLAS library found by threadpoolctl")
    pa.set_num_threads(2)
    if blas.current_threads() != 2:
        pytest.skip("BLAS would not take 2 threads here")

    class Token:
        pass

    token = Token()
    assert blas.acquire(token, 1) == 1
    pa.set_num_threads(2)
    assert blas.current_threads() == 1          # the call's limit stays in force ...
    blas.release(token)
    assert blas.current_threads() == 2          # ... and its release restores the new count


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_thread_setters_refuse_bad_values_as_torch(bad, restore_threads):
    for fn in ("set_num_threads", "set_num_interop_threads"):
        with pytest.raises(RuntimeError):
            getattr(pa, fn)(bad)
        if not isinstance(bad, bool):
            with pytest.raises(RuntimeError):
                getattr(torch, fn)(bad)
    assert pa.get_num_threads() >= 1


def test_set_num_interop_threads_sets_the_default_engine_workers(restore_threads):
    pa.set_num_interop_threads(1)
    assert pa.get_num_interop_threads() == 1 and default_engine().num_workers == 1
    x = pa.ones(3, requires_grad=True)
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0])
    pa.set_num_interop_threads(2)                 # again, after work started: allowed here
    assert default_engine().num_workers == 2


# ---- determinism and precision flags -------------------------------------------------------------
def test_deterministic_flags_as_torch():
    try:
        for mode, warn_only in ((True, False), (True, True), (False, False)):
            pa.use_deterministic_algorithms(mode, warn_only=warn_only)
            torch.use_deterministic_algorithms(mode, warn_only=warn_only)
            assert pa.are_deterministic_algorithms_enabled() == \
                torch.are_deterministic_algorithms_enabled()
            assert pa.is_deterministic_algorithms_warn_only_enabled() == \
                torch.is_deterministic_algorithms_warn_only_enabled()
        with pytest.raises(TypeError):
            pa.use_deterministic_algorithms("x")
        with pytest.raises(TypeError):
            torch.use_deterministic_algorithms("x")
    finally:
        pa.use_deterministic_algorithms(False)
        torch.use_deterministic_algorithms(False)


def test_float32_matmul_precision():
    try:
        assert pa.get_float32_matmul_precision() == "highest"
        pa.set_float32_matmul_precision("high")
        assert pa.get_float32_matmul_precision() == "high"
        with pytest.warns(UserWarning, match="no effect"):
            pa.set_float32_matmul_precision("x")
        assert pa.get_float32_matmul_precision() == "high"
    finally:
        pa.set_float32_matmul_precision("highest")


# ---- inference_mode -----------------------------------------------------------------------------
def test_inference_mode_as_torch():
    for m in (torch, pa):
        assert not m.is_inference_mode_enabled()
        with m.inference_mode():
            assert m.is_inference_mode_enabled() and not m.is_grad_enabled()
            with m.inference_mode(False):
                assert not m.is_inference_mode_enabled() and m.is_grad_enabled()
            assert m.is_inference_mode_enabled()
        with m.no_grad():
            with m.inference_mode(False):
                assert m.is_grad_enabled()          # torch turns recording back on
            assert not m.is_grad_enabled()
        assert m.is_grad_enabled() and not m.is_inference_mode_enabled()

        @m.inference_mode
        def bare():
            return m.is_inference_mode_enabled(), m.is_grad_enabled()

        @m.inference_mode()
        def called(a, b=1):
            return a + b, m.is_grad_enabled()

        assert bare() == (True, False) and called(1, b=2) == (3, False)
        assert bare.__name__ == "bare"
    x = pa.ones(2, requires_grad=True)
    with pa.inference_mode():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None


def test_inference_mode_is_per_thread():
    seen = []
    inside, release = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen.append((pa.is_inference_mode_enabled(), pa.is_grad_enabled()))
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with pa.inference_mode():
        inside.set()
        release.wait(30)
    t.join(30)
    assert seen == [(False, True)]


def test_inference_mode_restores_after_an_exception():
    with pytest.raises(ValueError):
        with pa.inference_mode():
            raise ValueError("boom")
    assert pa.is_grad_enabled() and not pa.is_inference_mode_enabled()


# ---- Tensor.__format__ ---------------------------------------------------------------------------
FORMATS = [(1.5, ".4f"), (1.5, ""), (3, ""), (3, "d"), (3, ".2f"), (2.0, ">8"), (True, ""),
           (-0.000123, ".3e"), (7, "05d")]


@pytest.mark.parametrize("value,spec", FORMATS)
def test_format_of_0d_tensors_matches_torch(value, spec):
    t = torch.tensor(value)
    x = pa.tensor(value)
    assert format(x, spec) == format(t, spec)
    assert f"{x:{spec}}" == f"{t:{spec}}"


def test_format_of_other_tensors_as_torch():
    with pytest.raises(TypeError, match="unsupported format string"):
        format(torch.tensor([1.5, 2.0]), ".4f")
    with pytest.raises(TypeError, match="unsupported format string"):
        format(pa.tensor([1.5, 2.0]), ".4f")
    assert format(pa.tensor([1.5, 2.0]), "") == str(pa.tensor([1.5, 2.0]))
    p = pa.nn.Parameter(pa.tensor(1.5).numpy())
    tp = torch.nn.Parameter(torch.tensor(1.5))
    with pytest.raises(TypeError):
        format(tp, ".2f")
    with pytest.raises(TypeError):
        format(p, ".2f")                      # a subclass: object's format, as torch's
    loss = (pa.tensor([1.0, 2.0], requires_grad=True) ** 2).sum()
    assert f"{loss:.4f}" == "5.0000"


# ---- pa.load(map_location=, weights_only=) -------------------------------------------------------
def test_load_accepts_torchs_arguments(tmp_path):
    path = tmp_path / "ckpt"
    pa.save({"w": pa.tensor([1.0, 2.0], requires_grad=True), "step": 3}, path)
    for kwargs in ({"map_location": "cpu"}, {"map_location": pa.device("cpu")},
                   {"map_location": torch.device("cpu")}, {"map_location": {"cuda:0": "cpu"}},
                   {"map_location": lambda storage, loc: storage}, {"weights_only": True},
                   {"weights_only": False}, {"mmap": False}, {"encoding": "latin1"},
                   {"map_location": "cpu", "weights_only": True, "max_bytes": 1 << 20}):
        obj = pa.load(path, **kwargs)
        assert obj["step"] == 3 and obj["w"].requires_grad
        np.testing.assert_array_equal(obj["w"].numpy(), [1.0, 2.0])
    assert pa.load(path, "cpu")["step"] == 3               # positional, as torch.load
    for bad in ("cuda", "cuda:0", pa.device("cuda"), {"cpu": "cuda:1"}):
        with pytest.raises(RuntimeError, match="CUDA"):
            pa.load(path, map_location=bad)
    with pytest.raises(TypeError, match="map_location"):
        pa.load(path, map_location=3)
