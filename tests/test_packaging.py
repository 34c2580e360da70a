"""The built wheel carries the metadata users and indexes read: name, the one version
(`parallel_autograd.__version__`), the licence and its file, the Pythons CI tests, the
runtime dependencies (numpy and threadpoolctl only), the typing marker; and nothing but the
library (no tests, no stress harness)."""
import email.parser
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

import parallel_autograd as pa

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _setuptools_can_build() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out),
           str(ROOT)]
    if _setuptools_can_build():  # offline and fast; else pip fetches setuptools
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if proc.returncode:
        pytest.fail(f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}")
    (path,) = out.glob("parallel_autograd-*.whl")
    return zipfile.ZipFile(path)


def _metadata(wheel):
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(name).decode())


@pytest.mark.timeout(300)
def test_wheel_metadata(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "parallel_autograd"
    assert meta["Version"] == pa.__version__
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["Summary"] and meta["Author"]
    assert meta["Description-Content-Type"] == "text/markdown"
    requires = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("=")[0] for r in requires) == ["numpy",
                                                                        "threadpoolctl"]
    classifiers = meta.get_all("Classifier")
    # every Python version .ci/run tests is claimed, and no other
    ci = (ROOT / ".ci" / "run").read_text()
    tested = {"3.11"} | set(re.findall(r"^\s*other_python (3\.\d+) ", ci, re.M))
    claimed = {c.rsplit(" ", 1)[1] for c in classifiers
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert claimed == tested
    assert "Typing :: Typed" in classifiers


@pytest.mark.timeout(300)
def test_wheel_holds_the_library_its_licence_and_typing_marker(wheel):
    names = wheel.namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "parallel_autograd/py.typed" in names
    top = {n.split("/")[0] for n in names}
    assert top == {"parallel_autograd", f"parallel_autograd-{pa.__version__}.dist-info"}


def test_version_is_written_once():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "\nversion =" not in text.split("[tool")[0]
    assert re.search(r'^__version__ = "[^"]+"$', (ROOT / "parallel_autograd" /
                                                   "__init__.py").read_text(), re.M)
