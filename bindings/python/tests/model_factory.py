"""Small ONNX models built in memory for the binding tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

FLOAT = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def tensor(name, elem=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def add_model(shape=("N", 3)) -> onnx.ModelProto:
    """z = x + y (y has an initializer of ones), w = Relu(x)."""
    ones = helper.make_tensor("y", FLOAT, [1, 3], [1.0, 1.0, 1.0])
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["z"], name="add"), helper.make_node("Relu", ["x"], ["w"], name="relu")],
        [tensor("x", FLOAT, list(shape)), tensor("y", FLOAT, [1, 3])],
        [tensor("z", FLOAT, None), tensor("w", FLOAT, list(shape))],
        initializers=[ones])


def unary_model(op: str, elem=FLOAT, shape=None, opset=17, **attrs) -> onnx.ModelProto:
    return make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", elem, shape)],
                      [tensor("y", elem, shape)], opset=opset)


def sequence_model() -> onnx.ModelProto:
    """seq -> (SequenceLength(seq), SequenceAt(seq, 0), SequenceInsert(seq, x)) : a sequence input and output."""
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, None))
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    return make_model(
        [helper.make_node("SequenceLength", ["seq"], ["n"]),
         helper.make_node("SequenceAt", ["seq", "zero"], ["first"]),
         helper.make_node("SequenceInsert", ["seq", "x"], ["seq_out"])],
        [helper.make_value_info("seq", seq_type), tensor("x", FLOAT, None)],
        [tensor("n", TensorProto.INT64, []), tensor("first", FLOAT, None), helper.make_value_info("seq_out", seq_type)],
        initializers=[zero])


def optional_model() -> onnx.ModelProto:
    """opt (optional tensor) -> (OptionalHasElement(opt), opt passed through Identity)."""
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(FLOAT, None))
    return make_model(
        [helper.make_node("OptionalHasElement", ["opt"], ["has"]), helper.make_node("Identity", ["opt"], ["same"])],
        [helper.make_value_info("opt", opt_type)],
        [tensor("has", TensorProto.BOOL, []), helper.make_value_info("same", opt_type)],
        opset=18)
