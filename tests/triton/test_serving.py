"""Requests through a real tritonserver: outputs equal `tessera run`'s on the same inputs over HTTP and gRPC,
auto-completed configurations, strings, statistics, and the per-request errors of bad or ragged requests."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness
import models
from conftest import LIGHT

# Every gRPC call is bounded (the HTTP clients have network_timeout): a dropped request fails its test instead of
# hanging until ctest's timeout.
GRPC_TIMEOUT_S = 60


def _infer(client, protocol, output_names, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None,
           **options):
    """One request through `client` of the tritonclient module `protocol` (http or grpc); its outputs by name
    (`output_names(result)` lists them when `outputs` does not)."""
    try:
        request = []
        for name, value in inputs.items():
            tensor = protocol.InferInput(name, list(value.shape), _triton_type(value))
            tensor.set_data_from_numpy(value)
            request.append(tensor)
        wanted = [protocol.InferRequestedOutput(o) for o in outputs] if outputs else None
        result = client.infer(model, request, outputs=wanted, **options)
        return {n: result.as_numpy(n) for n in outputs or output_names(result)}
    finally:
        client.close()


def infer_http(server, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None):
    return _infer(server.http(), httpclient, lambda r: [o["name"] for o in r.get_response()["outputs"]], model, inputs,
                  outputs)


def infer_grpc(server, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None):
    return _infer(server.grpc(), grpcclient, lambda r: [o.name for o in r.get_response().outputs], model, inputs,
                  outputs, client_timeout=GRPC_TIMEOUT_S)


def _triton_type(value: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype
    return np_to_triton_dtype(value.dtype)


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_light_models_match_tessera_run_over_http_and_grpc(server, repo, name):
    config = server.http().get_model_config(name)
    (input_config,) = config["input"]
    shape = [int(d) for d in input_config["dims"]]
    x = np.random.default_rng(3).random(shape, dtype=np.float32)
    expected = harness.tessera_run(repo / name / "1" / "model.onnx", {input_config["name"]: x})
    for infer in (infer_http, infer_grpc):
        got = infer(server, name, {input_config["name"]: x})
        assert got, f"{name}: no outputs"
        for output_name, value in got.items():
            reference = expected[harness.output_file_stem(output_name)]
            assert value.dtype == reference.dtype and value.shape == reference.shape, (output_name, value.shape)
            np.testing.assert_array_equal(value, reference, err_msg=f"{name} {output_name} via {infer.__name__}")


@pytest.mark.parametrize("batch", [1, 5])
def test_dense_batches_match_tessera_run_over_http_and_grpc(server, repo, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
    # The served instances run one intra-op thread; so does the reference.
    expected = harness.tessera_run(repo / "dense" / "1" / "model.onnx", {"x": x}, threads=1)
    for infer in (infer_http, infer_grpc):
        got = infer(server, "dense", {"x": x})
        np.testing.assert_array_equal(got["y"], expected["y"])
        # label is [N] in the model and [N, 1] to clients (config reshape).
        assert got["label"].shape == (batch, 1)
        np.testing.assert_array_equal(got["label"].reshape(-1), expected["label"])
        np.testing.assert_allclose(got["y"], models.dense_reference(x), rtol=1e-5, atol=1e-5)


def test_only_requested_outputs_are_returned(server):
    x = np.ones((2, 16), dtype=np.float32)
    got = infer_http(server, "dense", {"x": x}, outputs=["label"])
    assert set(got) == {"label"}


def test_auto_complete_fills_inputs_outputs_batching_from_the_model(server):
    config = server.http().get_model_config("dense_auto")
    assert config["max_batch_size"] == 8
    assert "dynamic_batching" in config
    inputs = {i["name"]: i for i in config["input"]}
    outputs = {o["name"]: o for o in config["output"]}
    assert inputs["x"]["data_type"] == "TYPE_FP32" and [int(d) for d in inputs["x"]["dims"]] == [16]
    assert outputs["y"]["data_type"] == "TYPE_FP32" and [int(d) for d in outputs["y"]["dims"]] == [8]
    # A per-item scalar is [1] to Triton, reshaped to [] for the model.
    assert outputs["label"]["data_type"] == "TYPE_INT64" and [int(d) for d in outputs["label"]["dims"]] == [1]
    assert outputs["label"]["reshape"]["shape"] in ([], None) or outputs["label"]["reshape"] == {}
    light = server.http().get_model_config("resnet50")
    assert light["max_batch_size"] == 0  # fixed [1, 3, 224, 224]: no batching
    assert [i["name"] for i in light["input"]] == ["gpu_0/data_0"]  # initializers listed as inputs are not served
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(infer_grpc(server, "dense_auto", {"x": x})["y"], models.dense_reference(x),
                               rtol=1e-5, atol=1e-5)


def test_strings_round_trip(server):
    text = np.array([[b"hello"], [b""], [b"w\x00rld \xc3\xa9"]], dtype=np.object_)
    for infer in (infer_http, infer_grpc):
        got = infer(server, "echo", {"text": text})["echo"]
        assert got.shape == (3, 1)
        assert [bytes(v) for v in got.reshape(-1)] == [b"hello", b"", b"w\x00rld \xc3\xa9"]


def test_statistics_are_reported(server):
    client = server.http()
    before = client.get_inference_statistics("dense")["model_stats"][0]
    x = np.ones((3, 16), dtype=np.float32)
    for _ in range(4):
        infer_http(server, "dense", {"x": x})
    # The backend reports a request's statistics right after sending its response: wait (bounded) for the last.
    deadline = time.monotonic() + 10
    while True:
        after = client.get_inference_statistics("dense")["model_stats"][0]
        if after["inference_count"] - before["inference_count"] >= 12 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    client.close()
    assert after["inference_count"] - before["inference_count"] == 12
    assert after["execution_count"] > before["execution_count"]
    stats = after["inference_stats"]
    for phase in ("compute_input", "compute_infer", "compute_output", "success"):
        assert stats[phase]["count"] >= 4 and stats[phase]["ns"] > 0, phase
    assert any(int(b["batch_size"]) == 3 for b in after["batch_stats"])


def test_wrong_shape_and_type_get_an_error_naming_the_input(server):
    # Checked by Triton against config.pbtxt...
    with pytest.raises(InferenceServerException, match="'x'"):
        infer_http(server, "dense", {"x": np.ones((1, 15), dtype=np.float32)})
    with pytest.raises(InferenceServerException, match=r"'x'.*FP64|FP64.*'x'"):
        infer_grpc(server, "dense", {"x": np.ones((1, 16), dtype=np.float64)})
    # ...and by the backend against the model, where the configuration leaves the dimension open.
    with pytest.raises(InferenceServerException, match=r"input 'x' has shape \[1,15\] but model 'dense_loose' expects"):
        infer_http(server, "dense_loose", {"x": np.ones((1, 15), dtype=np.float32)})
    x = np.ones((2, 16), dtype=np.float32)
    np.testing.assert_allclose(infer_http(server, "dense_loose", {"x": x})["y"], models.dense_reference(x),
                               rtol=1e-5, atol=1e-5)


def test_ragged_batch_rejects_only_the_mismatched_requests(server):
    # Four requests scheduled as one batch (preferred size 4, 10 s queue delay): two of length 3, two of length 5.
    # The batch runs at the first request's length; the others get an error of their own, the rest their sums.
    # The clients are connected and the requests built before a barrier releases all four at once, so that on a
    # loaded machine they still reach the batcher well within the queue delay.
    lengths = [3, 5, 3, 5]
    inputs = [np.arange(n, dtype=np.float32).reshape(1, n) + i for i, n in enumerate(lengths)]
    results: list = [None] * len(inputs)
    gate = threading.Barrier(len(inputs))

    def send(i: int):
        client = None
        try:
            client = server.http()
            tensor = httpclient.InferInput("x", list(inputs[i].shape), "FP32")
            tensor.set_data_from_numpy(inputs[i])
            gate.wait(timeout=30)
            try:
                results[i] = client.infer("row_sum", [tensor]).as_numpy("y")
            except InferenceServerException as error:
                results[i] = error
        except Exception as error:  # anything else (a timeout, a broken barrier) is recorded and fails below
            results[i] = f"unexpected {type(error).__name__}: {error}"
        finally:
            if client is not None:
                client.close()

    started = time.monotonic()
    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a request was not answered"
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"the four requests took {elapsed:.1f} s"
    unexpected = [r for r in results if isinstance(r, str) or r is None]
    assert not unexpected, unexpected
    served = [i for i, r in enumerate(results) if isinstance(r, np.ndarray)]
    rejected = [i for i, r in enumerate(results) if isinstance(r, InferenceServerException)]
    for i in served:
        np.testing.assert_allclose(results[i], inputs[i].sum(axis=1, keepdims=True))
    for i in rejected:
        assert "ragged batch: input 'x'" in str(results[i]), results[i]
    # The four shared one batch: one length was served, the other rejected, and one run of 2 was recorded.
    assert len(served) == 2 and len(rejected) == 2, results
    assert {lengths[i] for i in served} != {lengths[i] for i in rejected}
    stats = server.http().get_inference_statistics("row_sum")["model_stats"][0]
    assert [int(b["batch_size"]) for b in stats["batch_stats"]] == [2]
