"""Every command line of the repository: `--help` works from a shell (exit 0, the usage
names the command as it is typed), every option has a help text that gives its default,
and a bad value gets a message naming the option and what it expects."""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

# (command after the interpreter, prog in the usage line, where the parser is built)
CLIS = [
    (["-m", "stress"], "python -m stress", ("stress.__main__", None)),
    (["-m", "stress.compare"], "python -m stress.compare", ("stress.compare.cli", None)),
    (["-m", "stress.compare.mpi"], "python -m stress.compare.mpi", ("stress.compare.mpi", None)),
    ([os.path.join(EXAMPLES, "train_digits.py")], "train_digits.py",
     ("train_digits", "train_digits.py")),
    ([os.path.join(EXAMPLES, "train_ddp.py")], "train_ddp.py", ("train_ddp", "train_ddp.py")),
]
IDS = [c[1] for c in CLIS]


def _run(args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=100)


def _parser(where, monkeypatch) -> argparse.ArgumentParser:
    module, script = where
    if script is None:
        return importlib.import_module(module)._parser()
    monkeypatch.syspath_prepend(EXAMPLES)  # train_ddp imports train_digits as a script does
    spec = importlib.util.spec_from_file_location(module, os.path.join(EXAMPLES, script))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._parser()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("args", "prog", "where"), CLIS, ids=IDS)
def test_help_runs_and_names_the_command(args, prog, where):
    r = _run([*args, "--help"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {prog} "), r.stdout[:200]
    desc = r.stdout.split("\n\n")[1]  # the description: whole sentences, not a cut line
    assert desc.rstrip().endswith((".", ")")), desc


@pytest.mark.parametrize(("args", "prog", "where"), CLIS, ids=IDS)
def test_every_option_documented_with_its_default(args, prog, where, monkeypatch):
    p = _parser(where, monkeypatch)
    fmt = p._get_formatter()
    for a in p._actions:
        if not a.option_strings or a.help == argparse.SUPPRESS or isinstance(
                a, argparse._HelpAction):
            continue
        name = "/".join(a.option_strings)
        assert a.help, f"{prog} {name} has no help text"
        if a.nargs != 0 and a.default is not None:  # a value with a default: it is shown
            shown = fmt._expand_help(a) if hasattr(fmt, "_expand_help") else a.help
            assert "default" in shown.lower(), f"{prog} {name}: default not shown: {shown!r}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad", ["abc", "1,x", "0", ""])
def test_bad_worker_list_names_the_option_and_the_format(bad):
    r = _run(["-m", "stress", "--workers", bad, "--iterations", "0"])
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert "argument --workers: expected comma-separated positive integers" in last, last
    assert repr(bad) in last and "<lambda>" not in r.stderr


@pytest.mark.timeout(120)
def test_mpi_benchmark_trace_gets_a_fresh_file_each_run():
    """Without --trace, each profiled step's trace goes to a new temporary file (before: one
    fixed name, so two runs overwrote each other), and the result names it."""
    script = (
        "import json, types\n"
        "import parallel_autograd.distributed as dist\n"
        "from stress.compare import mpi\n"
        "dist.init()\n"
        "args = mpi._parser().parse_args(['--width', '8', '--layers', '1', '--batch', '4'])\n"
        "step = mpi.Step(args, 0)\n"
        "print(json.dumps([mpi.profiled(step, args.trace)['trace'] for _ in range(2)]))\n")
    r = _run(["-c", script])
    assert r.returncode == 0, r.stderr
    paths = json.loads(r.stdout.strip().splitlines()[-1])
    try:
        assert paths[0] != paths[1]
        for path in paths:
            assert os.path.basename(path).startswith("parallel_autograd_mpi_trace_")
            with open(path) as f:
                assert json.load(f)["traceEvents"]
    finally:
        for path in paths:
            os.remove(path)
