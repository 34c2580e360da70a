"""Launching MPI jobs from the tests (tests/test_distributed.py, tests/test_distributed_attacks.py):
`mpiexec -n N python script args...` as a process group of its own, on loopback shared memory only
(UCX_TLS=self,sm UCX_NET_DEVICES=lo), with a deadline at which the whole group is killed, so a
hang fails the test and leaves no process behind. MPI never starts inside the pytest process: a
fork after MPI_Init crashes at exit."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = (shutil.which("mpiexec", path=str(Path(sys.executable).parent))
           or shutil.which("mpiexec"))
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason="needs the [mpi] extra (mpi4py and an mpiexec): pip install '.[mpi]'")


def env() -> dict:
    """The environment of every launch: loopback only, one BLAS thread per rank."""
    return dict(os.environ, UCX_TLS="self,sm", UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def launch(n: int, script: str, *args: str) -> subprocess.Popen:
    """Start `mpiexec -n n python script args...` from the repository root."""
    return subprocess.Popen([MPIEXEC, "-n", str(n), sys.executable, script, *args], cwd=ROOT,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float, what: str) -> subprocess.CompletedProcess:
    """Its output once it ended; at `deadline` seconds the whole group is killed and the test
    fails; then no process of the group may be left."""
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{what} still ran after {deadline} s (killed):\n{out[-2000:]}\n"
                    f"{err[-4000:]}")
    no_survivors(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(n: int, script: str, *args: str, deadline: float = 40.0) -> subprocess.CompletedProcess:
    """`launch`, then `finish`."""
    return finish(launch(n, script, *args), deadline,
                  f"mpiexec -n {n} {script} {' '.join(args)}")


def no_survivors(pgid: int) -> None:
    """No process of the job's group is left 5 s after the launcher returned."""
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    pytest.fail("processes of the MPI job were still alive 5 s after mpiexec returned")
