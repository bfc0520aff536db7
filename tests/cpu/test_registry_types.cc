// The partitioner asks the CPU registry which nodes it can run, and the registry answers from the kernels'
// declared input types.  This checks, for a representative set of operators and every element type ONNX defines,
// that the answer is honest: either the registry refuses the node with a reason naming the op, the opset and the
// type (so that the model is refused at session creation), or the kernel it picks runs a small input of that type
// without failing.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "util/element_convert.h"
#include "util/float16_compute.h"
#include "util/type_list.h"

namespace tessera::cpu {
namespace {

using testing::HarnessValue;
using testing::NodeBuilder;
using testing::ValueHandle;

const KernelRegistry& registry() {
    static const KernelRegistry r = [] {
        KernelRegistry reg;
        register_all_kernels(reg);
        return reg;
    }();
    return r;
}

std::vector<int32_t> every_element_type() {
    return element_types_where([](int32_t) { return true; });
}

// A tensor of `type` whose elements are all one (the string "1"; complex 1 + 0i), packed types included.
ValueHandle ones(int32_t type, const Shape& shape) {
    ValueHandle v = testing::make_tensor_value(type, shape);
    const int64_t count = shape_size(shape);
    if (type == TESS_ELEMENT_STRING) {
        v->strings.assign(static_cast<size_t>(count), "1");
    } else if (type == TESS_ELEMENT_COMPLEX64 || type == TESS_ELEMENT_COMPLEX128) {
        const int32_t part = type == TESS_ELEMENT_COMPLEX64 ? TESS_ELEMENT_FLOAT32 : TESS_ELEMENT_FLOAT64;
        for (int64_t i = 0; i < count; ++i) convert::store_number(part, v->bytes.data(), 2 * i, 1.0);
    } else {
        for (int64_t i = 0; i < count; ++i) convert::store_number(type, v->bytes.data(), i, 1.0);
    }
    return v;
}

// One input of a test node: of the element type under test, or of a fixed type with given contents.
struct InputSpec {
    Shape shape;
    std::optional<int32_t> fixed_type;  // nullopt: the element type under test
    std::vector<int64_t> int64_values;  // contents of a fixed int64 input (ones otherwise)
};

struct OpCase {
    const char* op;
    int opset;
    std::vector<InputSpec> inputs;
    int32_t supported = TESS_ELEMENT_FLOAT32;  // a type the op must accept (validates the case itself)
    std::function<void(NodeBuilder&)> attributes = {};
};

InputSpec typed(Shape shape) { return {std::move(shape), std::nullopt, {}}; }
InputSpec fixed(int32_t type, Shape shape) { return {std::move(shape), type, {}}; }
InputSpec int64s(Shape shape, std::vector<int64_t> values) {
    return {std::move(shape), TESS_ELEMENT_INT64, std::move(values)};
}

std::vector<OpCase> op_cases() {
    return {
        {"MatMul", 13, {typed({2, 3}), typed({3, 2})}},
        {"Gemm", 13, {typed({2, 3}), typed({3, 2}), typed({2})}},
        {"Conv", 11, {typed({1, 1, 3, 3}), typed({1, 1, 2, 2}), typed({1})}},
        {"Conv", 22, {typed({1, 2, 4}), typed({2, 1, 2}), typed({2})}, TESS_ELEMENT_FLOAT32,
         [](NodeBuilder& n) { n.attr_int("group", 2); }},
        {"ConvTranspose", 11, {typed({1, 1, 3, 3}), typed({1, 1, 2, 2})}},
        {"Add", 14, {typed({2, 3}), typed({3})}},
        {"Relu", 14, {typed({2, 3})}},
        {"Softmax", 13, {typed({2, 3})}},
        {"ReduceSum", 13, {typed({2, 3}), int64s({1}, {1})}},
        {"Transpose", 13, {typed({2, 3})}, TESS_ELEMENT_FLOAT32, [](NodeBuilder& n) { n.attr_ints("perm", {1, 0}); }},
        {"Concat", 13, {typed({2, 1}), typed({2, 2})}, TESS_ELEMENT_FLOAT32,
         [](NodeBuilder& n) { n.attr_int("axis", 1); }},
        {"Cast", 21, {typed({4})}, TESS_ELEMENT_FLOAT32,
         [](NodeBuilder& n) { n.attr_int("to", TESS_ELEMENT_FLOAT32); }},
        {"Gather", 13, {typed({3, 2}), int64s({2}, {2, 0})}},
        {"Where", 16, {fixed(TESS_ELEMENT_BOOL, {3}), typed({3}), typed({3})}},
        {"NonZero", 13, {typed({2, 3})}},
        {"EyeLike", 9, {typed({2, 3})}},
        {"OneHot", 11, {typed({3}), int64s({}, {4}), fixed(TESS_ELEMENT_FLOAT32, {2})}},
        {"QuantizeLinear", 21, {typed({4}), fixed(TESS_ELEMENT_FLOAT32, {})}},
        {"DequantizeLinear", 21, {typed({4}), fixed(TESS_ELEMENT_FLOAT32, {})}, TESS_ELEMENT_INT8},
        // Operators opset 28 changed.
        {"BitShift", 28, {typed({3}), typed({3})}, TESS_ELEMENT_INT8,
         [](NodeBuilder& n) { n.attr_string("direction", "RIGHT"); }},
        {"SwiGLU", 28, {typed({4}), typed({4})}},
        {"ReduceMax", 20, {typed({2, 3}), int64s({1}, {1})}},
        {"ReduceLogSum", 28, {typed({2, 3}), int64s({1}, {1})}},
        {"ReduceLogSumExp", 28, {typed({2, 3}), int64s({1}, {1})}},
        {"ArgMin", 13, {typed({2, 3})}},
        {"Einsum", 28, {typed({2, 3}), typed({3, 2})}, TESS_ELEMENT_FLOAT32,
         [](NodeBuilder& n) { n.attr_string("equation", "ij,jk->ik"); }},
        {"SpaceToDepth", 28, {typed({1, 1, 2, 2})}, TESS_ELEMENT_FLOAT32,
         [](NodeBuilder& n) { n.attr_int("blocksize", 2).attr_string("mode", "CRD"); }},
        {"Celu", 28, {typed({3})}},
        {"Mod", 28, {typed({3}), typed({3})}},
        {"Compress", 28, {typed({3}), fixed(TESS_ELEMENT_BOOL, {3})}},
        {"ReverseSequence", 28, {typed({2, 2}), int64s({2}, {1, 2})}},
        {"Unique", 28, {typed({3})}},
    };
}

std::string case_name(const OpCase& c) { return std::string(c.op) + " opset " + std::to_string(c.opset); }

// Runs the case with every input of the type under test set to `type`.  Returns the registry's reason when it
// refuses the node, nullopt when the kernel ran.
std::optional<std::string> run_case(const OpCase& c, int32_t type) {
    NodeBuilder node(c.op, c.opset);
    std::vector<ValueHandle> inputs;
    for (const InputSpec& spec : c.inputs) {
        const int32_t input_type = spec.fixed_type.value_or(type);
        node.input(input_type, spec.shape);
        inputs.push_back(spec.int64_values.empty() ? ones(input_type, spec.shape)
                                                   : testing::tensor<int64_t>(spec.shape, spec.int64_values));
    }
    node.output();
    if (c.attributes) c.attributes(node);
    std::string why;
    if (registry().find(node.view(), &why) == nullptr) return why;
    testing::run_node(registry(), node, inputs);
    return std::nullopt;
}

TEST(RegistryTypes, AcceptedTypesRunAndRefusedTypesAreNamed) {
    for (const OpCase& c : op_cases()) {
        for (int32_t type : every_element_type()) {
            const std::string type_name = element_type_name(type);
            SCOPED_TRACE(case_name(c) + " with " + type_name);
            std::optional<std::string> refusal;
            try {
                refusal = run_case(c, type);
            } catch (const std::exception& e) {
                ADD_FAILURE() << "the registry accepts the node but the kernel fails: " << e.what();
                continue;
            }
            if (!refusal) continue;
            EXPECT_NE(type, c.supported) << "the case's own type is refused: " << *refusal;
            EXPECT_NE(refusal->find(c.op), std::string::npos) << *refusal;
            EXPECT_NE(refusal->find("opset " + std::to_string(c.opset)), std::string::npos) << *refusal;
            EXPECT_NE(refusal->find(type_name), std::string::npos) << *refusal;
        }
    }
}

// Cast's output type is an attribute: a target the kernel cannot produce is refused when the kernel is created,
// naming the op and the type, never while it runs.
TEST(RegistryTypes, CastTargetsAreCheckedAtCreation) {
    for (int32_t type : every_element_type()) {
        const std::string type_name = element_type_name(type);
        SCOPED_TRACE("Cast to " + type_name);
        NodeBuilder node("Cast", 21);
        node.input(TESS_ELEMENT_FLOAT32, Shape{4}).output().attr_int("to", type);
        std::unique_ptr<Kernel> kernel;
        try {
            kernel = testing::create_kernel(registry(), node);
        } catch (const KernelError& e) {
            const std::string message = e.what();
            EXPECT_NE(message.find("Cast"), std::string::npos) << message;
            EXPECT_NE(message.find(type_name), std::string::npos) << message;
            continue;
        }
        EXPECT_NO_THROW(testing::run_kernel(*kernel, node, {ones(TESS_ELEMENT_FLOAT32, {4})}));
    }
}

// float16 and bfloat16 Gemm, MatMul, Conv and ConvTranspose compute in float: with constant weights (widened once
// when the kernel is created, and packed for Conv) and with runtime ones, the result is the float kernel's result
// on the widened inputs, rounded to the type.
ValueHandle random_16bit(int32_t type, const Shape& shape, uint32_t seed) {
    ValueHandle v = testing::make_tensor_value(type, shape);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(shape_size(shape)));
    for (float& x : values) x = dist(gen);
    narrow_from_float(values.data(), type, v->bytes.data(), shape_size(shape));
    return v;
}

ValueHandle widened(const ValueHandle& v) {
    ValueHandle wide = testing::make_tensor_value(TESS_ELEMENT_FLOAT32, v->dims);
    widen_to_float(v->element_type, v->bytes.data(), reinterpret_cast<float*>(wide->bytes.data()), v->element_count());
    return wide;
}

TEST(RegistryTypes, SixteenBitFloatsComputeInFloat) {
    struct ProductCase {
        const char* op;
        std::vector<Shape> shapes;  // input 0 is a runtime input; the others may be constants
        std::function<void(NodeBuilder&)> attributes;
    };
    const ProductCase cases[] = {
        {"MatMul", {{2, 3, 40}, {40, 24}}, {}},
        {"Gemm", {{5, 40}, {24, 40}, {24}}, [](NodeBuilder& n) { n.attr_int("transB", 1).attr_float("beta", 0.5f); }},
        {"Conv", {{1, 8, 9, 9}, {16, 8, 3, 3}, {16}}, [](NodeBuilder& n) { n.attr_ints("pads", {1, 1, 1, 1}); }},
        {"Conv", {{1, 4, 7, 7}, {8, 1, 3, 3}, {8}}, [](NodeBuilder& n) { n.attr_int("group", 4); }},
        {"ConvTranspose", {{1, 4, 5, 5}, {4, 6, 3, 3}, {6}}, [](NodeBuilder& n) { n.attr_ints("strides", {2, 2}); }},
    };
    for (const ProductCase& c : cases) {
        for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
            for (bool constant_weights : {false, true}) {
                SCOPED_TRACE(std::string(c.op) + " " + element_type_name(type) +
                             (constant_weights ? " with constant weights" : " with runtime weights"));
                std::vector<ValueHandle> inputs, wide_inputs;
                NodeBuilder node(c.op, 22), float_node(c.op, 22);
                for (size_t i = 0; i < c.shapes.size(); ++i) {
                    inputs.push_back(random_16bit(type, c.shapes[i], uint32_t(17 + i)));
                    wide_inputs.push_back(widened(inputs.back()));
                    if (i > 0 && constant_weights) {
                        node.constant_input(inputs.back());
                    } else {
                        node.input(type, c.shapes[i]);
                    }
                    float_node.input(TESS_ELEMENT_FLOAT32, c.shapes[i]);
                }
                node.output();
                float_node.output();
                if (c.attributes) {
                    c.attributes(node);
                    c.attributes(float_node);
                }
                const ValueHandle y = testing::run_node(registry(), node, inputs)[0];
                const ValueHandle expected = testing::run_node(registry(), float_node, wide_inputs)[0];
                ASSERT_EQ(y->element_type, type);
                ASSERT_EQ(y->dims, expected->dims);
                std::vector<uint16_t> rounded(static_cast<size_t>(expected->element_count()));
                narrow_from_float(reinterpret_cast<const float*>(expected->bytes.data()), type, rounded.data(),
                                  expected->element_count());
                ASSERT_EQ(y->bytes.size(), rounded.size() * sizeof(uint16_t));
                EXPECT_EQ(std::memcmp(y->bytes.data(), rounded.data(), y->bytes.size()), 0);
            }
        }
    }
}

}  // namespace
}  // namespace tessera::cpu
