#!/usr/bin/env python3
"""Writes the ONNX node conformance suite of the installed onnx package to disk.

onnx stopped shipping its backend test data; the cases live as Python code (onnx.backend.test.case.node) that
builds each model and computes its expected outputs.  This script runs that code and writes every case in the
usual layout, so tessera_conformance reads it exactly like the 1.22 data in ../shared:

    OUT/node/test_name/model.onnx
    OUT/node/test_name/test_data_set_0/input_0.pb ... output_0.pb

OUT/VERSION holds the onnx version the cases came from; when it matches the installed onnx the suite is not
written again (generating it takes about a minute).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import onnx
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node as node_cases


def serialize(value, type_proto: onnx.TypeProto, name: str) -> bytes:
    """One input or output value as the protobuf the conformance layout stores for its declared type."""
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def write_case(case, case_dir: str) -> None:
    os.makedirs(case_dir)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    graph = case.model.graph
    for index, (inputs, outputs) in enumerate(case.data_sets):
        data_dir = os.path.join(case_dir, f"test_data_set_{index}")
        os.makedirs(data_dir)
        for j, value in enumerate(inputs):
            with open(os.path.join(data_dir, f"input_{j}.pb"), "wb") as f:
                f.write(serialize(value, graph.input[j].type, graph.input[j].name))
        for j, value in enumerate(outputs):
            with open(os.path.join(data_dir, f"output_{j}.pb"), "wb") as f:
                f.write(serialize(value, graph.output[j].type, graph.output[j].name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="folder to write (its node/ subfolder holds the cases)")
    parser.add_argument("--force", action="store_true", help="write the suite even if the cached one matches")
    args = parser.parse_args()

    stamp = os.path.join(args.output, "VERSION")
    if not args.force and os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == onnx.__version__:
                return 0

    node_dir = os.path.join(args.output, "node")
    staging = node_dir + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    cases = node_cases.collect_testcases()
    names = set()
    for case in cases:
        if case.name in names:
            raise SystemExit(f"two node cases are named {case.name}")
        names.add(case.name)
        write_case(case, os.path.join(staging, case.name))
    # Replace the old suite only once the new one is whole, so an interrupted run never leaves half a suite.
    shutil.rmtree(node_dir, ignore_errors=True)
    os.rename(staging, node_dir)
    with open(stamp, "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"wrote {len(cases)} onnx {onnx.__version__} node cases to {node_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
