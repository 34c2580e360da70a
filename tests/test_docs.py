"""Every code block of README.md and docs/*.md is checked, so the docs cannot drift.

Each fence says what it is:

- ```python: runs as printed, alone, in a fresh namespace (no prelude: a block imports what
  it uses), with the library's default dtype (float32); a `print(...)` line whose comment
  starts with `# True` must print a line starting with True. `/tmp/` paths go to the
  test's temporary directory.
- ```python mpi: starts MPI (`dist.init()`): runs the same way in a child process when
  mpi4py is installed (MPI must not start in the test process), else skipped.
- ```python no-run: a sketch that cannot run as is (your model and data); the line before it
  must be `<!-- no-run: why -->`, and there may be at most MAX_NO_RUN of them.
- ```sh: commands, not run (they take minutes): every `make` target exists in the Makefile,
  every repository path exists, and every `--option` given to `python -m MODULE` or to a
  repository script is in that command's `--help`.
- ```text: illustrative (diagrams, output).

Any other fence (a bare one included) fails `test_every_block_is_marked`.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
KINDS = {"python", "python mpi", "python no-run", "sh", "text"}
MAX_NO_RUN = 3
MPI_ENV = {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo"}


@dataclass(frozen=True)
class Block:
    doc: str      # path relative to the repository
    line: int     # the opening fence's line number
    kind: str     # the fence's info string
    before: str   # the line before the fence
    code: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def _blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        start = None
        for n, ln in enumerate(lines):
            if not ln.lstrip().startswith("```"):
                continue
            if start is None:
                start = n
            else:
                open_ = lines[start]
                out.append(Block(str(doc.relative_to(ROOT)), start + 1,
                                 open_.strip()[3:].strip(),
                                 lines[start - 1].strip() if start else "",
                                 "\n".join(lines[start + 1:n]) + "\n"))
                start = None
        assert start is None, f"{doc}: a fence opened at line {start + 1} never closes"
    return out


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if b.kind in ("python", "python mpi")]
SH = [b for b in BLOCKS if b.kind == "sh"]


def test_every_block_is_marked():
    bad = [f"{b}: ```{b.kind}" for b in BLOCKS if b.kind not in KINDS]
    assert not bad, f"mark each block as one of {sorted(KINDS)}: {bad}"
    indented = [str(b) for b in BLOCKS
                if not (ROOT / b.doc).read_text().splitlines()[b.line - 1].startswith("```")]
    assert not indented, f"indented fences are not checked the same way: {indented}"


def test_the_blocks_not_run_are_few_and_say_why():
    no_run = [b for b in BLOCKS if b.kind == "python no-run"]
    assert len(no_run) <= MAX_NO_RUN, [str(b) for b in no_run]
    for b in no_run:
        assert re.fullmatch(r"<!-- no-run: .+ -->", b.before), \
            f"{b}: put `<!-- no-run: why -->` on the line before the fence"
    for b in BLOCKS:
        mpi_marked = b.kind == "python mpi"
        assert mpi_marked == (b.kind.startswith("python") and "dist.init(" in b.code
                              and b.kind != "python no-run"), \
            f"{b}: a block that starts MPI is marked ```python mpi, and only such a block"
    counts = {k: sum(b.kind == k for b in BLOCKS) for k in sorted(KINDS)}
    print("docs code blocks:", counts)
    assert counts["python"] >= 20 and len(SH) >= 5, counts   # the walk found the blocks


def _claims(code: str) -> list[str]:
    return [ln for ln in code.splitlines()
            if ln.lstrip().startswith("print(") and re.search(r"#\s*True\b", ln)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", RUN, ids=str)
def test_python_block_runs_as_printed(block, tmp_path, monkeypatch):
    code = block.code.replace("/tmp/", f"{tmp_path}/")
    monkeypatch.chdir(tmp_path)
    if block.kind == "python mpi":
        if importlib.util.find_spec("mpi4py") is None:
            pytest.skip("needs the [mpi] extra")
        env = dict(os.environ, **MPI_ENV, PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=100, check=False)
        assert proc.returncode == 0, proc.stderr
        printed = proc.stdout.splitlines()
    else:
        # the library's own default (float32), as a reader's program gets; conftest's
        # per-test fixture puts the suite's float64 back afterwards
        from parallel_autograd import dtypes
        dtypes.set_default_dtype(dtypes.float32)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(block), "exec"), {"__name__": "__docs__"})  # noqa: S102
        printed = out.getvalue().splitlines()
    claims = _claims(code)
    trues = [ln for ln in printed if ln.split()[:1] == ["True"]]
    assert len(trues) >= len(claims), (claims, printed)


# ---- sh blocks: commands that take minutes are not run; what they name must exist ----

@functools.cache
def _make_targets() -> frozenset:
    text = (ROOT / "Makefile").read_text()
    return frozenset(m for line in re.findall(r"^([\w./-][\w./ -]*):(?!=)", text, re.MULTILINE)
                     for m in line.split())


@functools.cache
def _help(*command: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, *command, "--help"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=90, check=False)
    assert proc.returncode == 0, f"{' '.join(command)} --help failed:\n{proc.stderr}"
    return proc.stdout


def _commands(code: str) -> list[list[str]]:
    joined = code.replace("\\\n", " ")
    return [shlex.split(ln, comments=True) for ln in joined.splitlines() if ln.strip()]


def _check_python(words: list[str]) -> list[str]:
    """`python -m MOD opts` or `python path.py opts`: the module or script exists and
    takes every option given."""
    if words[:1] == ["-m"] and len(words) > 1:
        if importlib.util.find_spec(words[1].split(".")[0]) is None and \
                not (ROOT / words[1].split(".")[0]).exists():
            return [f"no module {words[1]}"]
        target, rest = ("-m", words[1]), words[2:]
    elif words and words[0].endswith(".py") and (ROOT / words[0]).exists():
        target, rest = (words[0],), words[1:]
    else:
        return []   # a user's script (train.py), or nothing to check
    usage = _help(*target)
    return [f"{' '.join(target)} has no option {w}" for w in rest
            if w.startswith("--") and not re.search(rf"{re.escape(w.split('=')[0])}\b", usage)]


def _check_command(words: list[str]) -> list[str]:
    while words and re.fullmatch(r"\w+=.*", words[0]):   # VAR=value prefixes
        words = words[1:]
    if not words:
        return []
    problems = [f"no such path {w}" for w in words
                if re.fullmatch(r"(examples|tools|stress|tests|docs)/[\w./-]+", w)
                and not (ROOT / w).exists()]
    prog = os.path.basename(words[0])
    if prog == "make":
        problems += [f"no make target {w}" for w in words[1:]
                     if not re.fullmatch(r"\w+=.*", w) and w not in _make_targets()]
    elif prog == "mpiexec":
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] in ("-n", "-np") else rest[1:]
        problems += _check_command(rest)
    elif re.fullmatch(r"python[\d.]*t?", prog):
        problems += _check_python(words[1:])
    return problems


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", SH, ids=str)
def test_shell_block_names_what_exists(block):
    problems = [p for words in _commands(block.code) for p in _check_command(words)]
    assert not problems, f"{block}: {problems}"


def test_the_shell_check_catches_a_wrong_command():
    """The check can fail: an unknown target, path and option are each reported."""
    assert _check_command(["make", "no-such-target"])
    assert _check_command(["python", "examples/no_such_script.py"])
    assert _check_command(["python", "-m", "stress", "--no-such-option"])
    assert not _check_command(["make", "test", "PARITY=1"])


def test_relative_links_point_at_files_that_exist():
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            path = target.split("#")[0]
            if path and not re.match(r"\w+://", path) and not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken
