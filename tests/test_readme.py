"""Every Python example in the README and docs/ops.md runs as printed (after `import numpy
as np` and `import parallel_autograd as pa`), and where a line ends in `# True`, prints True."""
from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
README = ROOT / "README.md"
BLOCKS = [b for doc in (README, ROOT / "docs" / "ops.md") if doc.exists()
          for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)]


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.timeout(120)
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_example_runs(i, tmp_path, monkeypatch):
    code = BLOCKS[i].replace("/tmp/", f"{tmp_path}/")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("import numpy as np\nimport parallel_autograd as pa\n" + code,
                     f"README example {i}", "exec"), {})
    printed = out.getvalue().splitlines()
    claims_true = [ln for ln in code.splitlines()
                   if ln.lstrip().startswith("print(") and re.search(r"#\s*True\s*$", ln)]
    assert printed.count("True") >= len(claims_true), (claims_true, printed)
