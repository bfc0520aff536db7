"""Hostile or careless inputs cost one clear error and leave the session usable (issue: robustness)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from model_factory import make_model, tensor, unary_model
from onnx import TensorProto, helper

import tessera


def branch(name: str, value: np.ndarray):
    """A subgraph that outputs a constant."""
    const = helper.make_node("Constant", [], [f"{name}_out"],
                             value=helper.make_tensor(f"{name}_v", helper.np_dtype_to_tensor_dtype(value.dtype),
                                                      value.shape, value.flatten().tolist()))
    return helper.make_graph([const], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.UNDEFINED,
                                                                                None)])


def test_an_output_of_another_type_than_declared_is_an_error():
    # The else branch yields int64 although the graph declares a float output: the onnx checker rejects such a
    # model, and a runtime must not hand back a mislabelled value.
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("then", np.array([1.5], np.float32)),
                            else_branch=branch("else", np.array([7], np.int64)))
    session = tessera.InferenceSession(make_model([node], [tensor("c", TensorProto.BOOL, [])],
                                                  [tensor("y", TensorProto.FLOAT, None)]))
    (y,) = session.run(None, {"c": np.array(True)})
    assert y.dtype == np.float32 and y.tolist() == [1.5]
    with pytest.raises(tessera.TesseraError, match="output 'y' is declared float but the model produced int64"):
        session.run(None, {"c": np.array(False)})
    (y,) = session.run(None, {"c": np.array(True)})  # still usable
    assert y.tolist() == [1.5]


@pytest.mark.parametrize("feed_key", [1, None, b"x"])
def test_a_feed_key_that_is_not_a_string_is_an_invalid_argument(feed_key):
    session = tessera.InferenceSession(unary_model("Relu", shape=[2]))
    with pytest.raises(tessera.InvalidArgument, match="input_feed key must be a str"):
        session.run(None, {feed_key: np.zeros(2, np.float32)})
    with pytest.raises(tessera.InvalidArgument, match="output name must be a str"):
        session.run([0], {"x": np.zeros(2, np.float32)})
    (y,) = session.run(None, {"x": np.array([-1, 2], np.float32)})
    assert y.tolist() == [0, 2]


def test_tile_whose_output_overflows_names_the_dimension():
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    session = tessera.InferenceSession(make_model([node], [tensor("x", shape=[2]), tensor("r", TensorProto.INT64, [1])],
                                                  [tensor("y")]))
    x = np.array([1, 2], np.float32)
    with pytest.raises(tessera.TesseraError, match=r"dimension 0 of the output \(2 x 9223372036854775807\) does not "
                                                   r"fit in 64 bits"):
        session.run(None, {"x": x, "r": np.array([2**63 - 1], np.int64)})
    (y,) = session.run(None, {"x": x, "r": np.array([2], np.int64)})
    assert y.tolist() == [1, 2, 1, 2]


def endless_loop_model():
    """y = x + trip_count ones, by a Loop that adds 1 per iteration; trip_count is an input, so it can be 2**40."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [tensor("i", TensorProto.INT64, []), tensor("cond_in", TensorProto.BOOL, []), tensor("acc_in", shape=[1])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("acc_out", shape=[1])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    loop = helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)
    return make_model([loop], [tensor("trips", TensorProto.INT64, []), tensor("x", shape=[1])],
                      [tensor("y", shape=[1])])


def test_a_run_past_its_timeout_is_cancelled_and_the_session_stays_usable():
    import time
    session = tessera.InferenceSession(endless_loop_model())
    options = tessera.RunOptions()
    options.timeout_ms = 200
    start = time.monotonic()
    with pytest.raises(tessera.Cancelled, match="stopped|timeout"):
        session.run(None, {"trips": np.array(2**40), "x": np.zeros(1, np.float32)}, options)
    assert time.monotonic() - start < 20
    (y,) = session.run(None, {"trips": np.array(3), "x": np.zeros(1, np.float32)}, options)
    assert y.tolist() == [3.0]


def test_terminate_from_another_thread_stops_a_run():
    import threading
    import time
    session = tessera.InferenceSession(endless_loop_model())
    options = tessera.RunOptions()
    timer = threading.Timer(0.2, lambda: setattr(options, "terminate", True))
    timer.start()
    start = time.monotonic()
    with pytest.raises(tessera.Cancelled) as error:
        session.run(None, {"trips": np.array(2**40), "x": np.zeros(1, np.float32)}, options)
    timer.join()
    assert error.value.code == tessera.StatusCode.CANCELLED
    assert time.monotonic() - start < 20
    # Still terminated: a new run with these options fails at once; cleared, it runs.
    with pytest.raises(tessera.Cancelled, match="terminated"):
        session.run(None, {"trips": np.array(1), "x": np.zeros(1, np.float32)}, options)
    options.terminate = False
    (y,) = session.run(None, {"trips": np.array(2), "x": np.ones(1, np.float32)}, options)
    assert y.tolist() == [3.0]


def test_run_options_check_their_arguments():
    options = tessera.RunOptions()
    with pytest.raises(tessera.InvalidArgument, match="negative"):
        options.timeout_ms = -1
    session = tessera.InferenceSession(unary_model("Relu", shape=[1]))
    with pytest.raises(tessera.InvalidArgument, match="run_options must be a tessera.RunOptions"):
        session.run(None, {"x": np.zeros(1, np.float32)}, {"terminate": True})


def test_run_options_tag_the_log_and_profile_one_run(tmp_path):
    messages = []
    env = tessera.Environment(log_level=tessera.LogLevel.DEBUG, log_callback=lambda level, text: messages.append(text))
    session = tessera.InferenceSession(unary_model("Relu", shape=[2]), environment=env)
    options = tessera.RunOptions()
    options.logid = "request-7"
    options.profile_path = tmp_path / "run.json"
    assert options.logid == "request-7"
    (y,) = session.run(None, {"x": np.array([-1, 2], np.float32)}, options)
    assert y.tolist() == [0.0, 2.0]
    assert any(m.endswith("[run request-7] run started") for m in messages), messages
    assert any("[run request-7] run finished in" in m for m in messages), messages
    trace = json.loads((tmp_path / "run.json").read_text())
    assert any(event.get("cat") == "node" for event in trace["traceEvents"]), trace
    # A run without them: no tag, no trace.
    messages.clear()
    options.logid = ""
    options.profile_path = ""
    (tmp_path / "run.json").unlink()
    session.run(None, {"x": np.array([-1, 2], np.float32)}, options)
    assert not any("[run " in m for m in messages)
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("threads", [100000, 2**40, -1])
def test_absurd_thread_counts_are_refused_before_any_thread_starts(threads):
    with pytest.raises(tessera.InvalidArgument, match="intra-op threads requested|negative|out of range"):
        tessera.InferenceSession(unary_model("Relu", shape=[1]), intra_op_threads=threads)
    session = tessera.InferenceSession(unary_model("Relu", shape=[1]), intra_op_threads=2)
    assert session.run(None, {"x": np.array([-1], np.float32)})[0].tolist() == [0]


def test_a_run_that_would_pass_the_memory_limit_fails_cleanly_and_the_session_stays_usable():
    # y = (x @ w) @ w2: the intermediate of a [n, 4096] x [4096, 4096] product is 64 MiB for n = 4096.
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 4096], rng.standard_normal((64, 4096), np.float32).tobytes(),
                           raw=True)
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [4096, 1], rng.standard_normal((4096, 1), np.float32).tobytes(),
                            raw=True)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
                       [tensor("x", shape=["n", 64])], [tensor("y", shape=["n", 1])], initializers=[w, w2])
    session = tessera.InferenceSession(model, memory_limit_bytes=32 << 20)
    with pytest.raises(tessera.OutOfMemory, match="memory limit of 33554432 bytes"):
        session.run(None, {"x": np.ones((4096, 64), np.float32)})
    small = rng.standard_normal((8, 64), np.float32)
    (y,) = session.run(None, {"x": small})
    reference = tessera.InferenceSession(model)
    np.testing.assert_array_equal(y, reference.run(None, {"x": small})[0])
    with pytest.raises(tessera.InvalidArgument, match="memory_limit_bytes"):
        tessera.InferenceSession(model, memory_limit_bytes=-1)


# Plugin isolation: plugins that crash, abort, exit or hang while loading (tests/plugins/misbehaving.c; ctest names
# their directory) are skipped with what happened, and this process lives on to report it.
MISBEHAVING_PLUGINS = os.environ.get("TESSERA_TEST_MISBEHAVING_PLUGINS", "")


@pytest.mark.skipif(not os.path.isdir(MISBEHAVING_PLUGINS), reason="TESSERA_TEST_MISBEHAVING_PLUGINS is not set")
def test_misbehaving_plugins_are_skipped_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = tessera.Environment(plugin_path=[MISBEHAVING_PLUGINS], no_default_plugin_dirs=True, plugin_probe_timeout=1,
                              log_level=tessera.LogLevel.ERROR)
    report = {os.path.basename(p["path"]): p for p in env.plugins()}
    expected = {
        "libtest_crash_entry.so": "crashed while being loaded in its probe process (SIGSEGV",
        "libtest_abort_entry.so": "aborted while being loaded in its probe process (SIGABRT)",
        "libtest_exit_entry.so": "ended the process (exit status 0)",
        "libtest_hang_entry.so": "hung while being loaded",
        "libtest_foreign_status.so": "returned a status the host did not create",
    }
    for name, reason in expected.items():
        assert report[name]["state"] == "skipped" and reason in report[name]["reason"], report[name]
    assert report["libtest_capability_error.so"]["state"] == "loaded"
    # A second environment takes the verdicts from the cache instead of probing again (with no longer a timeout: a
    # longer one would give the hanging plugin another chance).
    again = tessera.Environment(plugin_path=[MISBEHAVING_PLUGINS], no_default_plugin_dirs=True, plugin_probe_timeout=1,
                                log_level=tessera.LogLevel.ERROR)
    assert all("(cached verdict)" in p["reason"] for p in again.plugins()
               if os.path.basename(p["path"]) in expected and "foreign" not in p["path"])


def test_plugin_probe_options_are_checked():
    with pytest.raises(tessera.InvalidArgument, match="plugin_probe must be one of auto, off, rescan"):
        tessera.Environment(plugin_probe="sometimes")
    with pytest.raises(tessera.InvalidArgument, match="plugin_probe_timeout must be a positive number"):
        tessera.Environment(plugin_probe_timeout=0)
