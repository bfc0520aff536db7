"""Test harness for the Tessera backend: model repositories, tritonserver processes on loopback ports, and the
reference runs of `tessera run`.

Every wait here is bounded in time, every retry in count, and every address is 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

TRITONSERVER = os.environ["TRITONSERVER"]
BACKEND_DIR = os.environ["TRITON_TEST_BACKEND_DIR"]      # holds tessera/libtriton_tessera.so
TESSERA_CLI = os.environ["TESSERA_CLI"]
LIGHT_MODELS = Path(os.environ["TESSERA_BACKEND_DATA"]) / "light"
RESULTS_FILE = os.environ.get("TRITON_TEST_RESULTS")     # JSON of the measured figures, when set
LOOPBACK = "127.0.0.1"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the server and `tessera run`: run_tests.sh's settings for the test process alone (one BLAS
    thread, named in TRITON_TEST_PROCESS_ONLY) are put back to the caller's values, then `extra` applies."""
    env = dict(os.environ)
    for var in env.get("TRITON_TEST_PROCESS_ONLY", "").split():
        outer = env.pop(f"TRITON_TEST_OUTER_{var}", None)
        if outer is None:
            env.pop(var, None)
        else:
            env[var] = outer
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def write_model(repo: Path, name: str, config: str, model_file: Path | bytes | None, version: int = 1) -> Path:
    """repo/name/config.pbtxt and repo/name/<version>/model.onnx (a copy of model_file, or the bytes given)."""
    folder = repo / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    target = folder / str(version) / "model.onnx"
    if isinstance(model_file, bytes):
        target.write_bytes(model_file)
    elif model_file is not None:
        shutil.copyfile(model_file, target)
    return folder


class Server:
    """One tritonserver on free loopback ports, its log in a file; explicit model control."""

    START_SECONDS = 90.0

    def __init__(self, repo: Path, log_dir: Path, name: str = "server", load: tuple[str, ...] = ("*",),
                 extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None, backend_dir: str = BACKEND_DIR):
        self.repo, self.log_path = Path(repo), Path(log_dir) / f"{name}.log"
        self.backend_dir = backend_dir
        self.load, self.extra_args = load, extra_args
        self.env = child_env(env)
        self.process: subprocess.Popen | None = None
        self.http_port = self.grpc_port = 0

    @property
    def http_url(self) -> str:
        return f"{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    def start(self, wait_for: tuple[str, ...] = ()) -> "Server":
        # A port found free may be taken before the server binds it: a bounded number of fresh tries.
        for attempt in range(3):
            self.http_port, self.grpc_port = free_port(), free_port()
            args = [TRITONSERVER, f"--model-repository={self.repo}", f"--backend-directory={self.backend_dir}",
                    f"--http-address={LOOPBACK}", f"--http-port={self.http_port}",
                    f"--grpc-address={LOOPBACK}", f"--grpc-port={self.grpc_port}",
                    "--allow-metrics=false", "--model-control-mode=explicit", "--exit-on-error=false",
                    "--strict-readiness=false", "--exit-timeout-secs=10", "--log-verbose=0"]
            args += [f"--load-model={m}" for m in self.load] + list(self.extra_args)
            log = open(self.log_path, "a")
            log.write(f"\n==== start {attempt}: {' '.join(args)}\n")
            log.flush()
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=self.env)
            log.close()
            if self._wait_live():
                self.wait_models_ready(wait_for)
                return self
            self.stop()
            if "already in use" not in self.log_path.read_text(errors="replace"):
                break
        raise RuntimeError(f"tritonserver did not start; its log:\n{self.log_tail()}")

    def _wait_live(self) -> bool:
        import tritonclient.http as httpclient
        deadline = time.monotonic() + self.START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(Exception):
                client = httpclient.InferenceServerClient(self.http_url, connection_timeout=2, network_timeout=5)
                if client.is_server_live():
                    client.close()
                    return True
            time.sleep(0.2)
        return False

    def wait_models_ready(self, models: tuple[str, ...], seconds: float = 60.0) -> None:
        if not models:
            return
        client = self.http()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if all(self._ready(client, m) for m in models):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"models {models} not ready; server log:\n{self.log_tail()}")

    @staticmethod
    def _ready(client, model: str) -> bool:
        try:
            return client.is_model_ready(model)
        except Exception:
            return False

    def http(self, **kwargs):
        import tritonclient.http as httpclient
        kwargs.setdefault("connection_timeout", 10)
        kwargs.setdefault("network_timeout", 60)
        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def grpc(self):
        import tritonclient.grpc as grpcclient
        return grpcclient.InferenceServerClient(self.grpc_url)

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to finish anything."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if not self.process or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def tessera_run(model: Path, inputs: dict[str, np.ndarray], threads: int | None = None) -> dict[str, np.ndarray]:
    """The outputs of `tessera run MODEL --providers cpu --input NAME=FILE.npy ... --output-dir DIR`, by output file
    name.  CPU only, as the served KIND_CPU instances run: with a GPU present, Tessera's default order would put
    CUDA first and its results need not be bit-identical to the CPU provider's."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [TESSERA_CLI, "run", str(model), "--providers", "cpu", "--output-dir", f"{tmp}/out"]
        for i, (name, value) in enumerate(inputs.items()):
            np.save(f"{tmp}/in{i}.npy", value)
            args += ["--input", f"{name}={tmp}/in{i}.npy"]
        if threads is not None:
            args += ["--threads", str(threads)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=child_env())
        assert done.returncode == 0, f"tessera run failed: {done.stdout}\n{done.stderr}"
        return {p.stem: np.load(p) for p in Path(f"{tmp}/out").glob("*.npy")}


def output_file_stem(output_name: str) -> str:
    """The file name `tessera run --output-dir` gives an output ('/' is not allowed in a file name)."""
    return output_name.replace("/", "_")


def record_results(key: str, value) -> None:
    """Adds measured figures to the results file (read by docs/serving.md's table and the closing report)."""
    if not RESULTS_FILE:
        return
    import json
    path = Path(RESULTS_FILE)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
