"""pa.distributed and DistributedDataParallel under a real MPI launcher (`mpiexec`), when the
[mpi] extra is installed (skipped otherwise).

Every MPI run is a child process group of its own, limited to loopback shared memory
(UCX_TLS=self,sm UCX_NET_DEVICES=lo), with a deadline: at the deadline the whole group is
killed, so a hang fails the test and leaves no process behind. MPI never starts inside the
pytest process (a fork after MPI_Init crashes at exit).
"""
from __future__ import annotations

import json
import time

import pytest

from mpi_launch import needs_mpi, run

pytestmark = needs_mpi


def run_mpi(n: int, *args: str, deadline: float = 40.0):
    """`mpiexec -n n python args...` (tests/mpi_launch.py: own process group, loopback only,
    killed at `deadline`)."""
    return run(n, *args, deadline=deadline)


def report(proc) -> dict:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_api_and_ddp_checks(n):
    """tests/mpi_checks.py on 1, 2 and 3 ranks: collectives, errors, DDP gradients equal to
    the average of the ranks' local gradients in both engines, no_sync, unused parameters,
    bucket order, buffers, the merged trace."""
    proc = run_mpi(n, "tests/mpi_checks.py")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    assert sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("MPI CHECKS OK")) == \
        [f"MPI CHECKS OK {r}" for r in range(n)]


@pytest.mark.parametrize("n,model", [(2, "mlp"), (2, "cnn"), (4, "mlp"), (4, "cnn")])
def test_training_matches_one_process(n, model):
    """n ranks on shards of each batch, Adam, 20 steps: the loss curve and the final parameters
    equal one process on the concatenated batches within 1e-10, and every rank ends with
    bitwise the same parameters."""
    rep = report(run_mpi(n, "examples/train_ddp.py", "--model", model, "--check",
                         "--dtype", "float64", "--bucket-cap-mb", "0.01",
                         "--steps", "12" if model == "cnn" else "20"))
    assert rep["ok"] and rep["ranks_bitwise_equal"] and rep["world_size"] == n
    assert rep["max_loss_diff"] <= 1e-10 and rep["max_param_diff"] <= 1e-10
    if model == "mlp":  # it learns (the small CNN needs more than 12 steps)
        assert rep["last_loss"] < rep["first_loss"]


def test_bitwise_reproducible_across_runs_and_worker_counts():
    """For a fixed world size the trained parameters are bitwise identical from run to run and
    for 1 or 2 engine workers per rank."""
    digests = {report(run_mpi(2, "examples/train_ddp.py", "--model", "cnn", "--steps", "4",
                              "--bucket-cap-mb", "0.005", "--workers", w))["digest"]
               for w in ("1", "2", "2")}
    assert len(digests) == 1, digests


@pytest.mark.parametrize("where,message", [
    ("middle", "a synchronising backward failed"),   # DDP's failure callback
    ("early", "uncaught exception in the main thread"),  # before DDP joined: the excepthook
])
def test_fault_in_one_rank_ends_the_job(where, message):
    """An exception in rank 1's backward ends every rank (MPI_Abort), the error printed."""
    t0 = time.perf_counter()
    proc = run_mpi(2, "examples/train_ddp.py", "--fault-rank", "1", "--fault-where", where,
                   "--bucket-cap-mb", "0.01")
    assert proc.returncode != 0
    assert message in proc.stderr and "injected fault on rank 1" in proc.stderr, proc.stderr
    assert "rank 1 of 2" in proc.stderr
    assert time.perf_counter() - t0 < 30


def test_a_rank_that_hangs_makes_the_others_time_out_and_abort():
    """Rank 1 catches its error and hangs; rank 0's bucket all-reduce times out after
    `timeout` seconds and ends the job."""
    proc = run_mpi(2, "examples/train_ddp.py", "--fault-rank", "1", "--fault-where", "early",
                   "--fault-catch", "--timeout", "2", "--bucket-cap-mb", "0.01")
    assert proc.returncode != 0
    assert "did not complete within 2.0 s" in proc.stderr, proc.stderr
    assert "rank 0 of 2" in proc.stderr


def test_init_accepts_an_mpi_the_program_started():
    proc = run_mpi(2, "tests/mpi_user_started.py", "multiple")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["0", "1", "ACCEPTED", "ACCEPTED"]


def test_init_refuses_an_mpi_without_thread_support():
    """Below MPI_THREAD_SERIALIZED the engine's worker threads could not call MPI."""
    proc = run_mpi(1, "tests/mpi_user_started.py", "funneled")
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED" in proc.stdout and "MPI_THREAD_SERIALIZED" in proc.stdout
