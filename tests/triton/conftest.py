"""Fixtures: the shared model repository and one tritonserver serving it for the tests that only send requests."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import harness
import models

# Light models of the ONNX backend data (onnx's model zoo models with their weights made constant-of-shape), served
# with no inputs or outputs in config.pbtxt: the backend auto-completes them.
LIGHT = {"squeezenet": "light_squeezenet.onnx", "shufflenet": "light_shufflenet.onnx",
         "resnet50": "light_resnet50.onnx"}

DENSE_CONFIG = """
backend: "tessera"
max_batch_size: 16
input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [
  { name: "y", data_type: TYPE_FP32, dims: [ 8 ] },
  { name: "label", data_type: TYPE_INT64, dims: [ 1 ], reshape: { shape: [ ] } }
]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU, count: 2 } ]
parameters { key: "intra_op_threads" value: { string_value: "1" } }
"""


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory) -> Path:
    return Path(os.environ.get("TRITON_TEST_WORK") or tmp_path_factory.mktemp("triton"))


def light_config(name: str) -> str:
    return f'name: "{name}"\nbackend: "tessera"\ninstance_group [ {{ kind: KIND_CPU, count: 1 }} ]\n'


@pytest.fixture(scope="session")
def repo(work_dir) -> Path:
    repo = work_dir / "repository"
    for name, file in LIGHT.items():
        harness.write_model(repo, name, light_config(name), harness.LIGHT_MODELS / file)
    dense = models.dense_model()
    harness.write_model(repo, "dense", DENSE_CONFIG, dense)
    # The same model with nothing but the batch size: inputs, outputs (the label's reshape included) and dynamic
    # batching come from auto-complete.
    harness.write_model(repo, "dense_auto", 'backend: "tessera"\nmax_batch_size: 8\n', dense)
    # dims [-1] where the model says 16: Triton lets any length through, the backend checks the model's dimension.
    harness.write_model(repo, "dense_loose", DENSE_CONFIG.replace("dims: [ 16 ]", "dims: [ -1 ]")
                        .replace("count: 2", "count: 1"), dense)
    # Requests of different lengths may share a batch (allow_ragged_batch); the batcher waits up to 10 s for 4, a
    # margin for a loaded machine (the test sends all four at once and the batch runs as soon as they are there).
    harness.write_model(repo, "row_sum", """
backend: "tessera"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1 ], allow_ragged_batch: true } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 4 ], max_queue_delay_microseconds: 10000000 }
instance_group [ { kind: KIND_CPU, count: 1 } ]
""", models.row_sum_model())
    harness.write_model(repo, "echo", 'backend: "tessera"\nmax_batch_size: 4\n', models.string_echo_model())
    return repo


SERVED = ("squeezenet", "shufflenet", "resnet50", "dense", "dense_auto", "dense_loose", "row_sum", "echo")


@pytest.fixture(scope="session")
def server(repo, work_dir):
    server = harness.Server(repo, work_dir, name="shared", load=SERVED).start(wait_for=SERVED)
    yield server
    server.stop()
