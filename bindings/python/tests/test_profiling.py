"""Profiling (enable_profiling / profile_file, end_profiling): the Chrome trace of session creation, runs,
partition compute calls and nodes, checked on the bundled default model."""

from __future__ import annotations

import collections
import gc
import json
import os

import numpy as np
import pytest

import tessera

DEFAULT_MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "models", "default.onnx")
SESSION_PHASES = {"load", "optimize", "partition", "compile"}


def _image(batch: int = 2) -> np.ndarray:
    return np.linspace(0.0, 1.0, batch * 3 * 32 * 32, dtype=np.float32).reshape(batch, 3, 32, 32)


def _profiled_session(path, runs: int = 2):
    session = tessera.InferenceSession(DEFAULT_MODEL, providers=["cpu"], intra_op_threads=2,
                                       profile_file=str(path))
    for _ in range(runs):
        session.run(None, {"image": _image()})
    return session


def _load_trace(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    assert isinstance(trace, dict) and trace.get("displayTimeUnit") == "ms"
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] == "X"
        assert {"cat", "name", "pid", "tid", "ts", "dur", "args"} <= set(e)
        assert e["pid"] == os.getpid()
        assert isinstance(e["tid"], int) and 1 <= e["tid"] <= 64  # small per-thread ids
        assert e["dur"] >= 0 and e["ts"] >= 0
    return events


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "trace.json"
    session = _profiled_session(path)
    written = session.end_profiling()
    return session, written, path


def test_end_profiling_writes_the_trace_and_returns_its_path(profiled):
    session, written, path = profiled
    assert written == str(path)
    assert os.path.getsize(path) > 0
    # Later calls write nothing more and give the same path; runs after the end are not recorded.
    before = _load_trace(path)
    session.run(None, {"image": _image()})
    assert session.end_profiling() == written
    assert _load_trace(path) == before


def test_session_phases(profiled):
    events = _load_trace(profiled[2])
    phases = {e["name"]: e for e in events if e["cat"] == "session"}
    assert SESSION_PHASES <= set(phases)
    assert phases["load"]["ts"] <= phases["optimize"]["ts"] <= phases["partition"]["ts"] <= phases["compile"]["ts"]
    for name in SESSION_PHASES:
        assert phases[name]["dur"] >= 0
    assert phases["compile"]["args"]["partitions"] >= 1


def test_runs_partitions_and_nodes(profiled):
    session, _, path = profiled
    events = _load_trace(path)
    runs = sorted((e for e in events if e["cat"] == "run"), key=lambda e: e["args"]["run"])
    assert [r["args"]["run"] for r in runs] == [0, 1]
    plan = session.get_partitions()
    expected_ops = collections.Counter(op.split(":")[-1] for p in plan for op in p["ops"])
    named = {name for p in plan for name in p["nodes"] if "#" not in name}
    assert sum(expected_ops.values()) >= 5

    epsilon = 0.002  # microseconds are written with three decimals
    for run in runs:
        index = run["args"]["run"]
        start, end = run["ts"], run["ts"] + run["dur"]
        partitions = [e for e in events if e["cat"] == "partition" and e["args"]["run"] == index]
        assert len(partitions) == len(plan)
        for p in partitions:
            assert p["args"]["provider"] == plan[p["args"]["partition"]]["provider"] == "cpu"
            assert start - epsilon <= p["ts"] and p["ts"] + p["dur"] <= end + epsilon
        nodes = [e for e in events if e["cat"] == "node" and e["args"]["run"] == index]
        # Every node of the optimized graph, once per run, with its op type and provider.
        assert collections.Counter(e["args"]["op_type"] for e in nodes) == expected_ops
        assert {e["name"] for e in nodes if e["name"] != e["args"]["op_type"]} <= named
        assert named <= {e["name"] for e in nodes}
        for e in nodes:
            assert e["args"]["provider"] == "cpu"
            assert e["dur"] >= 0
            assert start - epsilon <= e["ts"] and e["ts"] + e["dur"] <= end + epsilon
            shapes = e["args"]["input_shapes"]
            assert shapes and all(s.startswith("[") or s == "-" for s in shapes.split(" "))
        # The first node reads the image (and its weights, prepacked or not, keep their shapes).
        first = min(nodes, key=lambda e: e["ts"])
        assert first["args"]["input_shapes"].split(" ")[0] == "[2,3,32,32]"
        assert "-" not in first["args"]["input_shapes"].split(" ")[:2]


def test_summary_by_operator_type(profiled):
    session = profiled[0]
    summary = session.get_profiling_summary()
    lines = summary.splitlines()
    assert lines[0].startswith("profile: 2 runs")
    assert "op type" in lines[1] and "share" in lines[1]
    rows = lines[2:]
    ops = {op.split(":")[-1] for p in session.get_partitions() for op in p["ops"]}
    assert {row.split()[0] for row in rows} == ops
    shares = [float(row.split()[-1].rstrip("%")) for row in rows]
    assert abs(sum(shares) - 100.0) < 0.5
    assert len(session.get_profiling_summary(max_rows=1).splitlines()) == 4  # header, columns, top op, the rest


def test_release_writes_the_trace_when_not_ended(tmp_path):
    path = tmp_path / "released.json"
    session = _profiled_session(path, runs=1)
    assert not path.exists()
    del session
    gc.collect()
    events = _load_trace(path)
    assert sum(e["cat"] == "run" for e in events) == 1


def test_profiling_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = tessera.InferenceSession(DEFAULT_MODEL, providers=["cpu"])
    session.run(None, {"image": _image()})
    assert session.end_profiling() == ""
    assert session.get_profiling_summary() == ""
    del session
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_enable_profiling_without_a_file_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = tessera.InferenceSession(DEFAULT_MODEL, providers=["cpu"], enable_profiling=True)
    session.run(None, {"image": _image()})
    path = session.end_profiling()
    assert os.path.basename(path).startswith("tessera_profile_") and path.endswith(".json")
    assert any(e["cat"] == "node" for e in _load_trace(tmp_path / path))


def test_profile_file_in_a_missing_directory_fails_session_creation(tmp_path):
    with pytest.raises(tessera.InvalidArgument, match="does not exist"):
        tessera.InferenceSession(DEFAULT_MODEL, profile_file=str(tmp_path / "no" / "trace.json"))
