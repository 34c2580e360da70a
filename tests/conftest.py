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
    arrays = [a if isinstance(a, np.ndarray) else a.numpy() if hasattr(a, "numpy") else None
              for a in items]
    held = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
    return result, peak - base - min(held, current - base)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_default():
    """The tests run with float64 as the default dtype (the library's is float32, as
    PyTorch's): most compare against finite differences or torch's float64 results to
    1e-10. Set per test and put back after it, so a test that changes it cannot leak.
    Tests of the real default run it in a subprocess (test_dtypes) or set float32."""
    from parallel_autograd import dtypes
    before = dtypes.get_default_dtype()
    dtypes.set_default_dtype(dtypes.float64)
    yield
    dtypes.set_default_dtype(before)


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
    """float64 as the default dtype from the start of the session (module-level code and
    module-scoped fixtures run before `_float64_default`, the per-test fixture).

    Ctrl+C: a process started in the background of a non-interactive shell (CI's
    lanes) inherits SIGINT ignored, so Python installs no KeyboardInterrupt handler and
    `_thread.interrupt_main()` does nothing: the Ctrl+C tests need Python's own handler.

    `PA_REQUIRE_TORCH=1` (set by `make test PARITY=1`, which CI runs): the PyTorch
    parity tests must run, so a torch that fails to import stops the session instead of
    turning a quarter of the suite into skips."""
    from parallel_autograd import dtypes
    dtypes.set_default_dtype(dtypes.float64)
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("PA_REQUIRE_TORCH") == "1":
        try:
            import torch  # noqa: F401
        except Exception as e:  # noqa: BLE001  (any import failure counts)
            raise pytest.UsageError(
                f"PA_REQUIRE_TORCH=1 but torch does not import ({e!r}): the parity tests "
                f"would all skip; install the [parity] extra") from e


# Tests measured at 2.5 s or more each (most spawn processes, fuzz, or run the stress
# harness; `--durations`, 2026-11-27, 2 loaded cores), marked `slow`. CI runs them once, in
# the GIL step with the PyTorch parity tests; the free-threaded and the extra CPython
# versions' steps leave them out (`-m "not walk and not slow"`) to keep CI in its budget;
# those steps keep two MPI tests (test_api_and_ddp_checks, test_training_matches_one_process)
# as their check of mpi4py on that interpreter.
SLOW = frozenset({
    "tests/test_training_parity.py::test_fifty_adam_steps_give_pytorchs_loss_curve",
    "tests/test_cli.py::test_bad_worker_list_names_the_option_and_the_format",
    "tests/test_compare.py::test_a_broken_torch_drops_the_pytorch_columns_not_the_run",
    "tests/test_compare.py::test_both_allocator_settings_in_children",
    "tests/test_compare.py::test_every_workload_from_the_command_line",
    "tests/test_compare.py::test_scientific_smoke_every_installed_library_computes_our_numbers",
    "tests/test_compare.py::test_a_broken_optional_library_drops_its_column_not_the_run",
    "tests/test_compare.py::test_forced_parallel_run_reports_parallel_and_its_own_speedup",
    "tests/test_compare.py::test_second_interpreter_side_by_side",
    "tests/test_compare.py::test_tiny_run_with_forward_step_and_the_pytorch_child",
    "tests/test_distributed.py::test_a_rank_that_hangs_makes_the_others_time_out_and_abort",
    "tests/test_distributed.py::test_bitwise_reproducible_across_runs_and_worker_counts",
    "tests/test_distributed.py::test_fault_in_one_rank_ends_the_job",
    "tests/test_distributed.py::test_init_accepts_an_mpi_the_program_started",
    "tests/test_distributed_attacks.py::test_a_fault_on_one_rank_ends_the_job",
    "tests/test_distributed_attacks.py::test_bucket_view_failed_backward_keeps_grad",
    "tests/test_distributed_attacks.py::test_bucket_view_unused_parameter_keeps_grad_bitwise",
    "tests/test_distributed_attacks.py::test_collective_edge_cases",
    "tests/test_distributed_attacks.py::test_every_collective_of_ddp_has_the_timeout",
    "tests/test_distributed_attacks.py::test_gradients_of_unusual_models_are_rank_averages",
    "tests/test_distributed_attacks.py::test_no_sync_with_unused_parameters",
    "tests/test_distributed_attacks.py::test_protocol_misuse",
    "tests/test_distributed_attacks.py::test_ranks_that_build_different_models_or_ddps_fail_at_construction_by_name",
    "tests/test_distributed_attacks.py::test_sigint_mid_training_ends_the_job",
    "tests/test_distributed_attacks.py::test_sigterm_to_one_rank_ends_the_job",
    "tests/test_distributed_attacks.py::test_split_communicator",
    "tests/test_distributed_attacks.py::test_two_ddp_instances_in_one_parallel_backward",
    "tests/test_distributed_attacks.py::test_unused_on_some_ranks_only",
    "tests/test_distributed_attacks.py::test_work_polled_from_two_threads",
    "tests/test_distributed_attacks.py::test_xfail_sys_exit_on_one_rank_ends_the_job_at_once",
    "tests/test_docs.py::test_python_block_runs_as_printed",
    "tests/test_docs.py::test_shell_block_names_what_exists",
    "tests/test_engine_semantics.py::test_deep_chain_no_recursion_error",
    "tests/test_getitem_torch.py::test_the_grid_of_index_expressions_matches_pytorch",
    "tests/test_higher_order.py::test_nn_third_derivatives",
    "tests/test_lean_index_linalg.py::test_forward_and_rules_allocate_within_their_bound",
    "tests/test_lean_index_linalg.py::test_the_lean_rules_keep_their_values",
    "tests/test_lean_nn.py::test_recurrence",
    "tests/test_nn_conv.py::test_third_derivatives",
    "tests/test_nn_rnn.py::test_recurrence_every_case_passes_the_registry_checks",
    "tests/test_nn_spatial.py::test_composites_gradcheck_and_gradgradcheck",
    "tests/test_programs.py::test_gpt_generates_pytorchs_tokens",
    "tests/test_programs.py::test_program_trains_as_on_pytorch",
    "tests/test_programs.py::test_program_with_its_gap_rewritten_trains_as_on_pytorch",
    "tests/test_promotion.py::test_operators_promote_as_pytorch",
    "tests/test_reliability.py::test_blas_threads_back_after_concurrent_calls_on_three_engines",
    "tests/test_reliability.py::test_ctrl_c_at_random_moments_never_leaves_a_partial_write_back",
    "tests/test_reliability.py::test_fork_during_the_processes_first_parallel_call",
    "tests/test_reliability.py::test_fork_while_another_thread_draws_random_numbers",
    "tests/test_reliability.py::test_fork_while_another_thread_records_ops",
    "tests/test_reliability.py::test_fork_while_threads_draw_record_and_step_an_optimizer",
    "tests/test_reliability.py::test_parked_contributions_are_bounded_in_bytes_not_only_in_count",
    "tests/test_reliability.py::test_peak_memory_of_large_branches_within_the_stated_bound",
    "tests/test_serialization_fuzz.py::test_fuzz_bytes_and_members_of_valid_files",
    "tests/test_serialization_fuzz.py::test_fuzz_crafted_manifests",
    "tests/test_serialization_fuzz.py::test_fuzz_crafted_safetensors_headers",
    "tests/test_serialization_fuzz.py::test_fuzz_safetensors_bytes_and_headers",
    "tests/test_stress.py::test_cli_runs_quietly_in_ci_writes_report_and_exits_zero",
    "tests/test_stress.py::test_create_graph_faults_pass_on_the_real_engine",
    "tests/test_stress.py::test_detects_a_fork_child_hanging_on_the_default_generators_lock",
    "tests/test_stress.py::test_detects_a_hanging_engine_and_goes_on",
    "tests/test_stress.py::test_detects_an_optimizer_step_interrupted_halfway",
    "tests/test_stress.py::test_detects_arrival_order_accumulation",
    "tests/test_stress.py::test_detects_memory_growth_across_iterations",
    "tests/test_stress.py::test_detects_threads_left_by_close",
    "tests/test_stress.py::test_detects_unlocked_leaf_accumulation_under_concurrency",
    "tests/test_stress.py::test_every_family_and_fault_kind_pass_on_the_real_engine",
    "tests/test_stress.py::test_families_cover_deep_partial_frozen_and_broadcast_graphs",
    "tests/test_stress.py::test_interrupt_kinds_detect_blas_left_lowered_by_an_interrupted_call",
    "tests/test_stress.py::test_multi_root_step_is_optional_and_runs_under_a_short_switch_interval",
    "tests/test_stress.py::test_regression_no_hang_on_shared_leaves_with_four_workers",
})


# Test files whose subject is the ops themselves (values, derivatives, dtypes, names and
# errors against PyTorch, one op call at a time): numpy kernels and Python that runs the same
# on every interpreter, and no threads of their own. Marked `oplevel`: the free-threaded step
# leaves them out (`-m "... and not oplevel"`), so its time goes to what the GIL's absence can
# change (the engine, its pool, hooks, forks, optimizers, data loading, the stress harness);
# they run on the GIL build (with PyTorch) and on Python 3.10.
OPLEVEL = ("test_ops_", "test_nn_", "test_torch_", "test_conformance.py",
           "test_registry.py", "test_dtype_support.py", "test_dtypes.py", "test_zero_size.py",
           "test_getitem_torch.py", "test_promotion.py", "test_int_results.py",
           "test_setitem.py", "test_tensor_methods.py", "test_tensor_constructor.py",
           "test_default_float32.py", "test_erf.py", "test_linalg.py", "test_optim_state.py",
           "test_lr_scheduler.py", "test_training_parity.py", "test_serialization_fuzz.py",
           "test_serialization_safetensors.py", "test_compare.py", "test_cli.py")
# ... except the layer tests that run the parallel engine's own width (RNN directions) or
# module machinery (hooks, state) rather than one op.
NOT_OPLEVEL = ("test_nn_module.py", "test_nn_rnn.py")


def _oplevel(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith(OPLEVEL) and name not in NOT_OPLEVEL


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[", 1)[0] in SLOW:
            item.add_marker(pytest.mark.slow)
        if _oplevel(item.nodeid.split("::", 1)[0]):
            item.add_marker(pytest.mark.oplevel)


@pytest.fixture
def blas_two_threads(monkeypatch):
    """BLAS at 2 threads (test_stress, test_reliability) with nobody holding
    threadpoolctl's control of OpenBLAS (so calls on any thread can lower it), the
    engine believing it has 2 cores (so 2 workers ask for 1 BLAS thread); every
    library's count is put back afterwards."""
    from stress.leaks import blas_counts, set_blas_counts

    from parallel_autograd.engine import engine as engine_module
    start = blas_counts()
    if not start:
        pytest.skip("threadpoolctl finds no BLAS")
    monkeypatch.setattr(engine_module, "usable_cores", lambda: 2)
    if set(set_blas_counts({p: 2 for p in start}).values()) != {2}:
        set_blas_counts(start)
        pytest.skip("BLAS cannot be set to 2 threads here")
    try:
        yield start
    finally:
        assert set_blas_counts(start) == start
