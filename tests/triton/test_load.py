"""Load: 16 concurrent clients x 200 requests against a model with dynamic batching and 2 instances.  Every response
must match its own request (distinct inputs, checked against numpy), none lost or duplicated.  The same load runs
with one session shared by the instances, without dynamic batching, and against one in-process Tessera session
(the Python bindings), and the figures are printed and recorded (docs/serving.md has the table)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

import harness
import models

CLIENTS = int(os.environ.get("TRITON_LOAD_CLIENTS", "16"))
REQUESTS_EACH = int(os.environ.get("TRITON_LOAD_REQUESTS", "200"))
# 8 MiB of weights: a request alone is a matrix-vector product that reads all of them, a batch a matrix product
# that reads them once for every request in it.
DIMS = tuple(int(d) for d in os.environ.get("TRITON_LOAD_DIMS", "512,2048,512").split(","))
QUEUE_DELAY_US = int(os.environ.get("TRITON_LOAD_QUEUE_DELAY_US", "500"))
SECONDS_LIMIT = 240.0    # per configuration; the loop stops there and the test fails if requests are missing
# Each gRPC call is bounded: a dropped request fails as an error of its own instead of hanging until ctest's timeout.
GRPC_TIMEOUT_S = 60

BASE_CONFIG = f"""
backend: "tessera"
max_batch_size: 16
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ {DIMS[0]} ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ {DIMS[2]} ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 2 }} ]
parameters {{ key: "intra_op_threads" value: {{ string_value: "1" }} }}
"""
CONFIGS = {
    # name: (config additions, description)
    "batched": (f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n",
                "dynamic batching, 2 instances, a session per instance (default)"),
    "batched_shared": (f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
                       'parameters { key: "share_session" value: { string_value: "true" } }\n',
                       "dynamic batching, 2 instances sharing one session"),
    "unbatched": ("", "no dynamic batching, 2 instances, a session per instance"),
}


def request_input(client_id: int, index: int) -> np.ndarray:
    return np.random.default_rng(client_id * 100_003 + index).standard_normal((1, DIMS[0])).astype(np.float32)


# Every request's input, made before the clock starts: the clients only send, receive and keep the outputs, and
# the outputs are checked after the clock stops, so that the figures measure serving and not the test's numpy.
INPUTS = {(c, i): request_input(c, i) for c in range(CLIENTS) for i in range(REQUESTS_EACH)}


def summarize(name: str, description: str, latencies: list[float], seconds: float, answered: int) -> dict:
    ms = np.array(latencies) * 1000.0
    return {"setup": name, "description": description, "requests": answered, "seconds": round(seconds, 3),
            "throughput_rps": round(answered / seconds, 1), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def run_load(send_factory) -> tuple[list[float], float, dict]:
    """CLIENTS threads, each sending REQUESTS_EACH requests one after the other with send = send_factory()."""
    latencies: list[float] = []
    answers: dict[tuple[int, int], object] = {}
    lock = threading.Lock()
    start_gate = threading.Barrier(CLIENTS + 1)

    def client_loop(client_id: int):
        send, close = send_factory()
        start_gate.wait(timeout=60)
        deadline = time.monotonic() + SECONDS_LIMIT
        for index in range(REQUESTS_EACH):
            if time.monotonic() > deadline:
                break
            x = INPUTS[(client_id, index)]
            began = time.perf_counter()
            try:
                outcome = send(x)
                elapsed = time.perf_counter() - began
            except Exception as error:  # recorded and asserted on
                elapsed, outcome = None, f"{type(error).__name__}: {error}"
            with lock:
                assert (client_id, index) not in answers, "a request was answered twice"
                answers[(client_id, index)] = outcome
                if elapsed is not None:
                    latencies.append(elapsed)
        close()

    # Daemon threads: a client stuck past the join's timeout fails the test below and does not hold pytest open.
    threads = [threading.Thread(target=client_loop, args=(c,), daemon=True) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    start_gate.wait(timeout=60)
    began = time.perf_counter()
    for t in threads:
        t.join(timeout=SECONDS_LIMIT + 60)
    seconds = time.perf_counter() - began
    assert not any(t.is_alive() for t in threads), "a client did not finish"
    return latencies, seconds, answers


def check_answers(answers: dict) -> None:
    """Every request answered once, with the output of its own input (inputs differ, so a swapped or stale
    response fails the comparison)."""
    assert len(answers) == CLIENTS * REQUESTS_EACH, "requests were lost"
    keys = sorted(answers)
    failures = {k: answers[k] for k in keys if isinstance(answers[k], str)}
    assert not failures, f"{len(failures)} requests failed: {list(failures.items())[:3]}"
    got = np.concatenate([answers[k] for k in keys])
    expected = models.dense_reference(np.concatenate([INPUTS[k] for k in keys]), *DIMS)
    mismatched = [keys[i] for i in np.flatnonzero(~np.isclose(got, expected, rtol=1e-3, atol=1e-3).all(axis=1))]
    assert not mismatched, f"{len(mismatched)} responses differ from their own request's output: {mismatched[:5]}"


def grpc_sender(url: str, model: str):
    def factory():
        client = grpcclient.InferenceServerClient(url)

        def send(x):
            tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            return client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput("y")],
                                client_timeout=GRPC_TIMEOUT_S).as_numpy("y")
        return send, client.close
    return factory


@pytest.fixture(scope="module")
def load_server(work_dir):
    repo = work_dir / "load-repository"
    model = models.dense_model(*DIMS)
    for name, (extra, _) in CONFIGS.items():
        harness.write_model(repo, name, BASE_CONFIG + extra, model)
    server = harness.Server(repo, work_dir, name="load", load=tuple(CONFIGS)).start(wait_for=tuple(CONFIGS))
    yield server, repo
    server.stop()


def test_load_every_response_matches_its_request(load_server):
    server, repo = load_server
    rows = []
    batch_counts = {}
    for name, (_, description) in CONFIGS.items():
        # A short warm-up so that first-run costs are not in the figures.
        warm_send, warm_close = grpc_sender(server.grpc_url, name)()
        for i in range(20):
            warm_send(request_input(999, i))
        warm_close()
        latencies, seconds, answers = run_load(grpc_sender(server.grpc_url, name))
        check_answers(answers)
        rows.append(summarize(name, description, latencies, seconds, len(answers)))
        stats = server.http().get_inference_statistics(name)["model_stats"][0]
        batch_counts[name] = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}

    # The same load on one in-process session (no server, no network), for comparison.
    import tessera
    session = tessera.InferenceSession(str(repo / "batched" / "1" / "model.onnx"), intra_op_threads=1)

    def in_process_factory():
        return (lambda x: session.run(["y"], {"x": x})[0]), (lambda: None)
    for i in range(20):
        session.run(["y"], {"x": request_input(999, i)})
    latencies, seconds, answers = run_load(in_process_factory)
    check_answers(answers)
    rows.append(summarize("in_process", "one in-process Tessera session (Python bindings, ctypes), 16 threads",
                          latencies, seconds, len(answers)))

    by_name = {r["setup"]: r for r in rows}
    gain = by_name["batched"]["throughput_rps"] / by_name["unbatched"]["throughput_rps"]
    print(f"\n{CLIENTS} clients x {REQUESTS_EACH} requests, model {DIMS[0]}-{DIMS[1]}-{DIMS[2]} MLP, "
          f"{os.cpu_count()} CPUs")
    for r in rows:
        print(f"  {r['setup']:15s} {r['throughput_rps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
              f"p99 {r['p99_ms']:7.2f} ms  ({r['description']})")
    print(f"  batching gain (batched / unbatched throughput): {gain:.2f}x")
    print(f"  batch sizes run (size: count): {batch_counts}")
    harness.record_results("load", {"clients": CLIENTS, "requests_each": REQUESTS_EACH, "cpus": os.cpu_count(),
                                    "model": f"MLP {DIMS[0]}-{DIMS[1]}-{DIMS[2]} fp32", "rows": rows,
                                    "batching_gain": round(gain, 2), "batch_sizes": batch_counts})
    # Dynamic batching must actually have formed batches of more than one request.
    assert any(size > 1 for size in batch_counts["batched"]), batch_counts
    assert all(size == 1 for size in batch_counts["unbatched"]), batch_counts
