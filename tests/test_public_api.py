"""The package's public surface: __all__, __version__, py.typed, docstrings."""
from __future__ import annotations

import builtins
import inspect
import pathlib
import re

import parallel_autograd as pa


def test_all_names_exist_and_star_import_shadows_no_builtin():
    assert len(pa.__all__) == len(set(pa.__all__))
    for name in pa.__all__:
        assert hasattr(pa, name), name
        assert not inspect.ismodule(getattr(pa, name)), f"{name} is a module"
        assert not hasattr(builtins, name), f"{name} would shadow a builtin"
    ns = {}
    exec("from parallel_autograd import *", ns)
    assert set(ns) - {"__builtins__"} == set(pa.__all__)


def test_every_public_callable_is_exported_or_deliberately_left_out():
    shadowing = {n for n in dir(pa) if hasattr(builtins, n) and not n.startswith("_")}
    # ops named like builtins, and PyTorch's dtypes pa.bool, pa.float (float32), pa.int (int32)
    assert shadowing == {"abs", "all", "any", "max", "min", "pow", "round", "sum", "bool",
                         "float", "int"}
    public = {n for n in dir(pa) if not n.startswith("_")
              and not inspect.ismodule(getattr(pa, n))}
    assert public - shadowing == set(pa.__all__)


def test_version_and_typing_marker():
    assert re.fullmatch(r"\d+\.\d+\.\d+", pa.__version__)
    pyproject = (pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text()
    # the version is written once, in the package (setuptools reads it: test_packaging)
    assert 'dynamic = ["version"]' in pyproject and '"parallel_autograd.__version__"' in pyproject
    assert (pathlib.Path(pa.__file__).parent / "py.typed").exists()


def test_public_functions_and_classes_have_docstrings():
    missing = [n for n in pa.__all__ if callable(getattr(pa, n))
               and not (getattr(pa, n).__doc__ or "").strip()]
    assert not missing, f"no docstring: {missing}"


def test_public_functions_have_type_hints():
    missing = []
    for n in pa.__all__:
        f = getattr(pa, n)
        if inspect.isclass(f) or not callable(f):
            continue
        sig = inspect.signature(f)
        if sig.return_annotation is inspect.Signature.empty and not any(
                p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()):
            missing.append(n)
    assert not missing, f"no type hints: {missing}"
