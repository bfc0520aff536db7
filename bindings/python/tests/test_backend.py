"""onnx's backend test suite (the node tests shipped in the onnx wheel) through tessera.backend, with onnx's coverage
report (`Operators (passed/loaded/total)`) in pytest's terminal summary.

Cases listed in tests/conformance/known_failures.txt (the one list both runners read: `case_name  # reason`, with an
optional `node/` prefix) are excluded.  Set TESSERA_BACKEND_TEST_ALL=1 to run them too (to compare with
`tessera_conformance --suite node`, whose "passed" count includes listed cases that pass).  Only the node category
is collected: the real/simple/pytorch categories would need downloads or are covered by the C++ runner.  CUDA
variants skip unless a usable 'cuda' provider is loaded (supports_device).
"""

from __future__ import annotations

import os
import re
import tempfile
import unittest

import numpy as np
import onnx.backend.test
import pytest
from onnx import helper

import tessera
import tessera.backend as backend

# onnx's pytest plugin: records passing/loaded models and prints the coverage table at the end.  It imports
# `tabulate` (requirements-dev.txt); without it the tests still run, only the report is missing.
try:
    import tabulate  # noqa: F401

    pytest_plugins = "onnx.backend.test.report"
except ImportError:  # pragma: no cover
    pytest_plugins = []

KNOWN_FAILURES = os.environ.get(
    "TESSERA_KNOWN_FAILURES",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "conformance", "known_failures.txt"))


def known_node_failures(path: str) -> list[str]:
    """Case names of the node suite listed in the known-failures file (other suites' entries are left out)."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            suite, _, case = name.rpartition("/")
            if suite in ("", "node"):
                names.append(case)
    return names


class TesseraBackendTestRunner(onnx.backend.test.BackendTest):
    """onnx's runner with one fix to its output comparison: onnx compares the items of a sequence output by calling
    itself on the bare items, so a 0-d item fails with `len() of unsized object` whatever the backend returns
    (test_loop16_seq_none).  Here every item is compared as a one-element output list instead."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        np.testing.assert_equal(len(outputs), len(ref_outputs))
        for expected, actual in zip(ref_outputs, outputs):
            if expected is None and actual is None:  # empty optionals
                continue
            if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
                np.testing.assert_equal(len(actual), len(expected), err_msg="sequence length")
                pairs = zip(expected, actual)
            else:
                pairs = [(expected, actual)]
            for e, a in pairs:
                super().assert_similar_outputs([e], [a], rtol, atol, model_dir=model_dir)


backend_test = TesseraBackendTestRunner(backend, __name__)
if os.environ.get("TESSERA_BACKEND_TEST_ALL") != "1":
    for case in known_node_failures(KNOWN_FAILURES):
        backend_test.exclude(rf"^{re.escape(case)}_(cpu|cuda)$")

# Node tests only, each a unittest.TestCase method that pytest collects.
OnnxBackendNodeModelTest = backend_test.enable_report().test_cases["OnnxBackendNodeModelTest"]


# ---- The backend's own interface ----------------------------------------------------------------------------------

def _model(op: str, domain: str = "") -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain=domain)], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


class TesseraBackendTest(unittest.TestCase):
    def test_supports_device(self):
        self.assertTrue(backend.supports_device("CPU"))
        self.assertEqual(backend.supports_device("CUDA"), "cuda" in tessera.get_default_environment().providers())
        self.assertFalse(backend.supports_device("TPU"))

    def test_run_node(self):
        node = helper.make_node("Add", ["a", "b"], ["c"])
        a, b = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
        (c,) = backend.run_node(node, [a, b])
        np.testing.assert_array_equal(c, [4, 6])
        out = backend.run_node(node, [a, b], outputs_info=[(np.float32, (2,))], opset_version=13)
        np.testing.assert_array_equal(out["c"], [4, 6])

    def test_prepare_runs_strict_on_the_device_provider(self):
        rep = backend.prepare(_model("Relu"), "CPU")
        self.assertEqual([p["provider"] for p in rep.session.get_partitions()], ["cpu"])
        np.testing.assert_array_equal(rep.run(np.array([-1.0], np.float32))[0], [0.0])
        np.testing.assert_array_equal(backend.run_model(_model("Neg"), {"x": np.ones(1, np.float32)})["y"], [-1])
        with self.assertRaises(tessera.NotImplemented):  # an unclaimed node is an error, never a fallback
            backend.prepare(_model("Foo", "com.example"), "CPU")
        with self.assertRaises(tessera.InvalidArgument):
            backend.prepare(_model("Relu"), "TPU")

    def test_known_failures_parse(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "known_failures.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write("# comment\n\ntest_a   # reason\nnode/test_b\nsimple/test_c  # other suite\nlight_x\n")
            self.assertEqual(known_node_failures(path), ["test_a", "test_b", "light_x"])
        known_node_failures(KNOWN_FAILURES)  # the real file parses


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
