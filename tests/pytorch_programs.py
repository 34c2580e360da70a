"""Run one PyTorch program's source on parallel_autograd and on PyTorch.

The programs in tests/programs/ are PyTorch code whose imports name parallel_autograd
(`import parallel_autograd as torch`, ...). `load(name, "torch")` executes the same text with
every `parallel_autograd` replaced by `torch`: the port is the import alone. `copy_weights`
starts PyTorch's modules from ours (state_dict -> numpy -> torch.from_numpy)."""
from __future__ import annotations

import pathlib
import sys
import types

import numpy as np

_DIR = pathlib.Path(__file__).parent / "programs"


def source(name: str, backend: str) -> str:
    """The program's text, its imports pointing at `backend` ("pa" or "torch")."""
    text = (_DIR / f"{name}.py").read_text()
    return text if backend == "pa" else text.replace("parallel_autograd", "torch")


def load(name: str, backend: str, replace: dict | None = None) -> types.ModuleType:
    """Execute the program's text (for `backend`) as a fresh module and return it;
    `replace` maps lines of the text to what runs instead (each must occur)."""
    text = source(name, backend)
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    mod = types.ModuleType(f"program_{name}_{backend}")
    mod.__file__ = str(_DIR / f"{name}.py")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up there
    exec(compile(text, mod.__file__, "exec"), mod.__dict__)  # noqa: S102
    return mod


def to_numpy(value) -> np.ndarray:
    """A state_dict value (pa Tensor, torch Tensor or array) as a numpy array, copied."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.array(value)


def snapshot(module) -> dict:
    """The module's state_dict as numpy arrays (copies)."""
    return {k: to_numpy(v) for k, v in module.state_dict().items()}


def copy_weights(state: dict, theirs, torch) -> None:
    """Load a `snapshot` of our module into PyTorch's twin (same names, shapes, dtypes)."""
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})


def max_rel(a, b) -> float:
    """The largest |a - b| / max(|b|, tiny) over two equal-length loss curves."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
