"""pa.profile(): one event per rule run, Chrome trace export."""
import json
import threading

import numpy as np
import pytest

import parallel_autograd as pa


def _graph():
    x = pa.tensor(np.linspace(-1, 1, 8), requires_grad=True)
    w = pa.tensor(np.ones(8), requires_grad=True)
    y = ((x * w).sin() + x.exp()).sum()   # mul, sin, exp, add, sum: 5 rules
    return x, w, y


def test_one_event_per_rule_run():
    x, w, y = _graph()
    with pa.profile() as prof:
        y.backward()
    events = prof.events
    assert sorted(e["name"] for e in events) == ["add", "exp", "mul", "sin", "sum"]
    me = threading.current_thread()
    for e in events:
        assert e["thread"] == me.name and e["thread_id"] == me.ident
        assert 0 <= e["start"] <= e["end"]
    # the sequential engine runs rules in decreasing creation order
    assert [e["name"] for e in events][0] == "sum"
    starts = [e["start"] for e in events]
    assert starts == sorted(starts)


def test_pruned_and_frozen_nodes_record_nothing():
    x = pa.tensor([1.0, 2.0], requires_grad=True)
    w = pa.tensor([3.0, 4.0], requires_grad=True)
    side = w.exp()
    y = (x.sin() + side).sum()
    with pa.profile() as prof:
        pa.grad(y, [x])
    assert sorted(e["name"] for e in prof.events) == ["add", "sin", "sum"]


def test_nothing_recorded_outside_the_context():
    x, w, y = _graph()
    with pa.profile() as prof:
        pass
    y.backward()
    assert prof.events == []
    assert pa.profiler.active() is None


def test_failed_rule_not_recorded_and_profile_closed_after_error():
    boom = pa.primitive("boom", lambda a: a * 1.0,
                        lambda g, ans, a: (_ for _ in ()).throw(ArithmeticError("no")))
    x = pa.tensor([1.0], requires_grad=True)
    with pytest.raises(ArithmeticError):
        with pa.profile() as prof:
            boom(x).sum().backward()
    assert [e["name"] for e in prof.events] == ["sum"]
    assert pa.profiler.active() is None


def test_nested_profile_rejected():
    with pa.profile():
        with pytest.raises(RuntimeError, match="already active"):
            with pa.profile():
                pass
    with pa.profile():  # the outer one cleaned up
        pass


def test_records_from_other_threads():
    def work():
        _, _, y = _graph()
        y.backward()

    with pa.profile() as prof:
        ts = [threading.Thread(target=work, name=f"bw-{i}") for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
    names = {e["thread"] for e in prof.events}
    assert names == {"bw-0", "bw-1", "bw-2"}
    assert len(prof.events) == 15


def test_export_chrome_trace(tmp_path):
    _, _, y = _graph()
    with pa.profile() as prof:
        y.backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    assert isinstance(data["traceEvents"], list)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in data["traceEvents"] if e["ph"] == "M"]
    assert sorted(e["name"] for e in spans) == ["add", "exp", "mul", "sin", "sum"]
    for e in spans:
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert e["tid"] == threading.get_ident() and e["pid"] == 1
    assert [m["args"]["name"] for m in meta] == [threading.current_thread().name]


def test_profile_with_path_writes_on_exit(tmp_path):
    path = tmp_path / "auto.json"
    _, _, y = _graph()
    with pa.profile(str(path)):
        y.backward()
    data = json.loads(path.read_text())
    assert len([e for e in data["traceEvents"] if e["ph"] == "X"]) == 5
