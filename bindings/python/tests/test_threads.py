"""One session run from several Python threads at once (tess_session_run is thread-safe; ctypes drops the GIL)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from model_factory import FLOAT, make_model, tensor
from onnx import helper

import tessera


def _mlp_model(n: int = 64) -> tuple:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((n, n)).astype(np.float32)
    w2 = rng.standard_normal((n, n)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        [tensor("x", FLOAT, ["B", n])], [tensor("y", FLOAT, ["B", n])],
        initializers=[helper.make_tensor("w1", FLOAT, w1.shape, w1.ravel()),
                      helper.make_tensor("w2", FLOAT, w2.shape, w2.ravel())])
    return model, w1, w2


def test_concurrent_runs_on_one_session():
    model, w1, w2 = _mlp_model()
    session = tessera.InferenceSession(model, intra_op_threads=2)

    def work(seed: int) -> float:
        rng = np.random.default_rng(seed)
        worst = 0.0
        for k in range(15):
            x = rng.standard_normal((1 + (seed + k) % 7, 64)).astype(np.float32)  # shapes differ between runs
            (y,) = session.run(None, {"x": x})
            expected = np.maximum(x @ w1, 0) @ w2
            worst = max(worst, float(np.max(np.abs(y - expected)) / (1 + np.max(np.abs(expected)))))
        return worst

    with ThreadPoolExecutor(max_workers=8) as pool:
        errors = list(pool.map(work, range(16)))
    assert max(errors) < 1e-4
