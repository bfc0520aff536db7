"""Faults: a broken model beside good ones, unloading under load, load/unload/reload without growth, a killed
server restarted on the same repository, and two servers behind a client that fails over."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness
import models
from conftest import DENSE_CONFIG


def dense_request(x: np.ndarray):
    tensor = httpclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def request_input(client_id: int, index: int) -> np.ndarray:
    """A distinct input per request, so that a response given to the wrong request is noticed."""
    return np.random.default_rng(client_id * 100_003 + index).standard_normal((1, 16)).astype(np.float32)


def assert_dense_output(x: np.ndarray, y: np.ndarray) -> None:
    np.testing.assert_allclose(y, models.dense_reference(x), rtol=1e-4, atol=1e-5)


BIG_DIMS = (256, 2048, 256)
BIG_CONFIG = DENSE_CONFIG.replace("dims: [ 16 ]", "dims: [ 256 ]").replace("dims: [ 8 ]", "dims: [ 256 ]")


@pytest.fixture(scope="module")
def fault_repo(work_dir):
    repo = work_dir / "fault-repository"
    harness.write_model(repo, "dense", DENSE_CONFIG, models.dense_model())
    # 4 MiB of weights per session: a session (or Tessera environment) leaked per reload shows in the RSS.
    harness.write_model(repo, "wide", BIG_CONFIG, models.dense_model(*BIG_DIMS))
    harness.write_model(repo, "broken", 'backend: "tessera"\nmax_batch_size: 0\n', b"this is not an ONNX model")
    harness.write_model(repo, "missing_file", 'backend: "tessera"\n', None)
    return repo


def test_broken_model_fails_to_load_while_others_serve(fault_repo, work_dir):
    server = harness.Server(fault_repo, work_dir, name="broken").start(wait_for=("dense",))
    try:
        client = server.http()
        index = {m["name"]: m for m in client.get_model_repository_index()}
        for name in ("broken", "missing_file"):
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert not client.is_model_ready(name)
        assert "tessera cannot load" in index["broken"]["reason"], index["broken"]
        assert "no model file at" in index["missing_file"]["reason"], index["missing_file"]
        # The repository API gives the same reason to whoever loads it again, and the log has it.
        with pytest.raises(InferenceServerException, match="tessera cannot load"):
            client.load_model("broken")
        assert "tessera cannot load" in server.log_text()
        x = request_input(0, 0)
        assert_dense_output(x, client.infer("dense", dense_request(x)).as_numpy("y"))
        client.close()
    finally:
        server.stop()


class ClientRun:
    """`clients` threads sending dense requests.  Every attempt is recorded before it is sent, and every answer
    after: 'ok' (the output of its own input), 'error' (the server refused it) or 'unexpected' (anything else: a
    wrong output, a timeout, a broken connection), so that nothing a thread meets can go unnoticed."""

    def __init__(self, url: str, clients: int, requests_each: int, seconds: float):
        self.lock = threading.Lock()
        self.attempts: list[tuple[int, int]] = []
        self.answers: dict[tuple[int, int], list[tuple[str, str | None]]] = {}
        self.threads = [threading.Thread(target=self._client_loop, args=(url, c, requests_each, seconds),
                                         daemon=True) for c in range(clients)]
        for t in self.threads:
            t.start()

    def _answer(self, key: tuple[int, int], outcome: str, detail: str | None = None) -> None:
        with self.lock:
            self.answers.setdefault(key, []).append((outcome, detail))

    def _client_loop(self, url: str, client_id: int, requests_each: int, seconds: float) -> None:
        client = None
        key = (client_id, -1)  # an error before the first request is recorded under index -1
        try:
            client = httpclient.InferenceServerClient(url, connection_timeout=5, network_timeout=30)
            deadline = time.monotonic() + seconds
            for index in range(requests_each):
                if time.monotonic() > deadline:
                    break
                key = (client_id, index)
                x = request_input(client_id, index)
                with self.lock:
                    self.attempts.append(key)
                try:
                    y = client.infer("dense", dense_request(x)).as_numpy("y")
                    assert_dense_output(x, y)
                    self._answer(key, "ok")
                except InferenceServerException as error:
                    self._answer(key, "error", str(error))
                except Exception as error:
                    self._answer(key, "unexpected", f"{type(error).__name__}: {error}")
        except Exception as error:
            self._answer(key, "unexpected", f"{type(error).__name__}: {error}")
        finally:
            if client is not None:
                client.close()

    def answered(self) -> int:
        with self.lock:
            return len(self.answers)

    def join(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "a client hung"


def test_unload_in_the_middle_of_load_finishes_or_fails_requests_cleanly(fault_repo, work_dir):
    server = harness.Server(fault_repo, work_dir, name="unload", load=("dense",)).start(wait_for=("dense",))
    try:
        control = server.http()
        run = ClientRun(server.http_url, clients=4, requests_each=150, seconds=60)
        deadline = time.monotonic() + 30
        while run.answered() < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        control.unload_model("dense")
        run.join(90)
        # Every attempted request got exactly one answer (and nothing was answered that was not attempted)...
        assert len(run.attempts) == len(set(run.attempts))
        assert set(run.answers) == set(run.attempts), set(run.answers) ^ set(run.attempts)
        doubled = {k: v for k, v in run.answers.items() if len(v) != 1}
        assert not doubled, doubled
        outcomes = {k: v[0] for k, v in run.answers.items()}
        # ...which is its own output or a clean server error: nothing else.
        unexpected = {k: v for k, v in outcomes.items() if v[0] not in ("ok", "error")}
        assert not unexpected, unexpected
        ok = [k for k, v in outcomes.items() if v[0] == "ok"]
        errors = {k: v[1] for k, v in outcomes.items() if v[0] == "error"}
        assert len(ok) >= 40
        # Requests after the unload began fail with Triton's "not ready/unavailable" error, never with garbage.
        assert errors, "no request saw the unload"
        expected_words = ("unavailable", "not ready", "not found", "unknown model", "no available versions")
        for key, message in errors.items():
            assert any(w in message.lower() for w in expected_words), (key, message)
        assert not control.is_model_ready("dense")
        # Loaded again, it serves again.
        control.load_model("dense")
        x = request_input(9, 9)
        assert_dense_output(x, control.infer("dense", dense_request(x)).as_numpy("y"))
        control.close()
    finally:
        server.stop()


def test_load_unload_reload_does_not_grow_memory(fault_repo, work_dir):
    # Two malloc arenas: glibc keeps freed memory per arena, and with one per thread the RSS swings by tens of MiB
    # from one cycle to the next, which would hide a leak or fake one.
    server = harness.Server(fault_repo, work_dir, name="reload", load=("wide",),
                            env={"MALLOC_ARENA_MAX": "2"}).start(wait_for=("wide",))
    try:
        client = server.http()
        x = np.random.default_rng(1).standard_normal((2, BIG_DIMS[0])).astype(np.float32)
        rss = []
        for cycle in range(12):
            y = client.infer("wide", dense_request(x)).as_numpy("y")
            np.testing.assert_allclose(y, models.dense_reference(x, *BIG_DIMS), rtol=1e-4, atol=1e-4)
            client.unload_model("wide")
            deadline = time.monotonic() + 30
            while client.is_model_ready("wide") and time.monotonic() < deadline:
                time.sleep(0.05)
            client.load_model("wide")
            rss.append(server.rss_kib())
        client.close()
        # Each load compiles two sessions over 4 MiB of weights: leaking them would add 8 MiB or more per cycle, 48 MiB
        # between the medians of cycles 2-5 and of the last four (the first cycles let the allocator settle).
        growth_kib = int(np.median(rss[-4:]) - np.median(rss[2:6]))
        harness.record_results("reload_rss_kib", rss)
        print(f"\nserver RSS after each of 12 unload/load cycles (KiB): {rss}; growth {growth_kib} KiB")
        assert growth_kib < 16 * 1024, f"RSS grew by {growth_kib} KiB over 6 reloads: {rss}"
    finally:
        server.stop()


def test_killed_server_restarts_and_serves_from_the_same_repository(fault_repo, work_dir):
    server = harness.Server(fault_repo, work_dir, name="restart", load=("dense",)).start(wait_for=("dense",))
    x = request_input(2, 2)
    try:
        client = server.http()
        assert_dense_output(x, client.infer("dense", dense_request(x)).as_numpy("y"))
        client.close()
        server.kill()
        assert server.process.returncode is not None
        server.start(wait_for=("dense",))
        client = server.http()
        assert_dense_output(x, client.infer("dense", dense_request(x)).as_numpy("y"))
        client.close()
    finally:
        server.stop()


class FailoverClient:
    """Sends each request to the first server that answers; a connection failure moves on to the next.  A request
    the server answered with an error is not retried (it was accepted and refused), so none is ever lost or doubled:
    each request gets exactly one answer."""

    def __init__(self, urls: list[str]):
        self.clients = [httpclient.InferenceServerClient(u, connection_timeout=2, network_timeout=10) for u in urls]
        self.preferred = 0

    def infer(self, x: np.ndarray) -> np.ndarray:
        last_error = None
        for attempt in range(2 * len(self.clients)):  # bounded: every server twice
            index = (self.preferred + attempt) % len(self.clients)
            try:
                y = self.clients[index].infer("dense", dense_request(x)).as_numpy("y")
                self.preferred = index
                return y
            except InferenceServerException as error:
                if not _is_connection_failure(error):
                    raise
                last_error = error
            except Exception as error:  # the connection was reset or refused under the client library
                last_error = error
        raise RuntimeError(f"every server failed: {last_error}")

    def close(self):
        for c in self.clients:
            try:
                c.close()
            except Exception:
                pass


def _is_connection_failure(error: InferenceServerException) -> bool:
    text = str(error).lower()
    return error.status() is None or any(w in text for w in ("connection", "refused", "reset", "broken pipe",
                                                                "timed out", "closed", "unavailable"))


def test_two_servers_behind_a_failover_client_lose_no_request(fault_repo, work_dir):
    first = harness.Server(fault_repo, work_dir, name="failover-a", load=("dense",)).start(wait_for=("dense",))
    second = harness.Server(fault_repo, work_dir, name="failover-b", load=("dense",)).start(wait_for=("dense",))
    try:
        clients, requests_each = 4, 60
        answers: dict[tuple[int, int], str] = {}
        lock = threading.Lock()

        def client_loop(client_id: int):
            client = FailoverClient([first.http_url, second.http_url])
            deadline = time.monotonic() + 120
            for index in range(requests_each):
                if time.monotonic() > deadline:
                    break
                x = request_input(client_id, index)
                try:
                    assert_dense_output(x, client.infer(x))
                    outcome = "ok"
                except Exception as error:  # recorded, asserted on below
                    outcome = f"failed: {error}"
                with lock:
                    assert (client_id, index) not in answers
                    answers[(client_id, index)] = outcome
            client.close()

        threads = [threading.Thread(target=client_loop, args=(c,), daemon=True) for c in range(clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(answers) < clients * requests_each // 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        first.kill()  # mid-load, with requests in flight
        for t in threads:
            t.join(timeout=150)
        assert not any(t.is_alive() for t in threads)
        failed = {k: v for k, v in answers.items() if v != "ok"}
        assert not failed, failed
        assert len(answers) == clients * requests_each
        served_by_second = second.http().get_inference_statistics("dense")["model_stats"][0]["inference_count"]
        assert int(served_by_second) > 0
    finally:
        first.stop()
        second.stop()


def test_bad_parameters_fail_the_load_naming_the_parameter(work_dir):
    repo = work_dir / "parameter-repository"
    harness.write_model(repo, "dense", DENSE_CONFIG, models.dense_model())
    harness.write_model(repo, "bad_level", DENSE_CONFIG + 'parameters { key: "optimization_level" '
                        'value: { string_value: "fastest" } }\n', models.dense_model())
    harness.write_model(repo, "no_such_provider", DENSE_CONFIG + 'parameters { key: "providers" '
                        'value: { string_value: "nonexistent" } }\nparameters { key: "strict" '
                        'value: { string_value: "true" } }\n', models.dense_model())
    server = harness.Server(repo, work_dir, name="parameters").start(wait_for=("dense",))
    try:
        client = server.http()
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["bad_level"]["state"] == "UNAVAILABLE"
        assert "parameter 'optimization_level' must be disabled, basic, extended or all" in index["bad_level"]["reason"]
        assert index["no_such_provider"]["state"] == "UNAVAILABLE"
        assert "nonexistent" in index["no_such_provider"]["reason"], index["no_such_provider"]
        client.close()
    finally:
        server.stop()
    # Backend-wide settings (--backend-config=tessera,KEY=VALUE) are the models' defaults: a bad one fails every load.
    server = harness.Server(repo, work_dir, name="backend-config", load=("dense",),
                            extra_args=("--backend-config=tessera,intra_op_threads=many",)).start()
    try:
        client = server.http()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            index = {m["name"]: m for m in client.get_model_repository_index()}
            if index.get("dense", {}).get("state") == "UNAVAILABLE":
                break
            time.sleep(0.1)
        assert "parameter 'intra_op_threads' must be an integer" in index["dense"]["reason"], index["dense"]
        client.close()
    finally:
        server.stop()
