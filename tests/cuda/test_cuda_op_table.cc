// The CUDA provider's operator table (plugins/cuda/impl/ops/op_table.h): keyed by domain, operator, opset range and
// input element types, like the CPU provider's kernel registry.  The lookup touches no device, so these tests run
// everywhere: they build a small table and look nodes up in it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ops/op_table.h"

namespace tessera::cuda::ops {
namespace {

// A node view with the given input element types (TESS_ELEMENT_UNDEFINED: unknown; -1: an absent input).
struct FakeNode {
    std::vector<TessValueView> values;
    std::vector<const TessValueView*> inputs;
    TessNodeView view{};

    FakeNode(const char* op, const char* domain, int64_t opset, const std::vector<int32_t>& types) {
        values.resize(types.size());
        for (size_t k = 0; k < types.size(); ++k) {
            values[k] = TessValueView{};
            values[k].struct_size = sizeof(TessValueView);
            values[k].name = "v";
            values[k].kind = TESS_VALUE_TENSOR;
            values[k].element_type = types[k];
            values[k].rank = -1;
            inputs.push_back(types[k] < 0 ? nullptr : &values[k]);
        }
        view.struct_size = sizeof(TessNodeView);
        view.name = "";
        view.op_type = op;
        view.domain = domain;
        view.opset = opset;
        view.input_count = inputs.size();
        view.inputs = inputs.data();
    }
};

// Each entry's check says which entry it is, so a test can tell the one found.
OpFns named(const std::string& id) {
    return {[id](const Node&) { return id; }, [](BuildContext&, const Node&, Fused&) { return std::unique_ptr<Step>(); }};
}

OpTable sample_table() {
    OpTable t;
    t.add("Relu", 1, 0, float_x(), named("relu"));
    t.add("Gelu", 20, 0, float_x(), named("gelu"));
    const InputTypes x_and_int64 = {{0, float_types()}, {1, {TESS_ELEMENT_INT64}}};
    t.add("Reshape", 1, 4, float_x(), named("reshape-1"));
    t.add("Reshape", 5, 0, x_and_int64, named("reshape-5"));
    t.add(OpEntry{"ai.tessera", "Gelu", 1, 0, float_x(), named("fused-gelu").check, named("fused-gelu").build});
    return t;
}

std::string found_id(const OpTable& t, const FakeNode& n, std::string* why = nullptr) {
    std::string reason;
    const OpEntry* e = t.find(n.view, &reason);
    if (why != nullptr) *why = reason;
    if (e == nullptr) return "";
    EXPECT_TRUE(reason.empty()) << reason;
    return e->check(Node(n.view));
}

TEST(CudaOpTable, FindsTheEntryForDomainOpsetAndTypes) {
    const OpTable t = sample_table();
    EXPECT_EQ(t.size(), 5u);
    EXPECT_EQ(found_id(t, FakeNode("Relu", "", 13, {TESS_ELEMENT_FLOAT32})), "relu");
    EXPECT_EQ(found_id(t, FakeNode("Relu", "ai.onnx", 1, {TESS_ELEMENT_FLOAT16})), "relu");
    EXPECT_EQ(found_id(t, FakeNode("Relu", "", 21, {TESS_ELEMENT_UNDEFINED})), "relu") << "unknown types pass";
    EXPECT_EQ(found_id(t, FakeNode("Gelu", "", 20, {TESS_ELEMENT_FLOAT32})), "gelu");
    EXPECT_EQ(found_id(t, FakeNode("Gelu", "ai.tessera", 1, {TESS_ELEMENT_FLOAT32})), "fused-gelu");
    // The opset picks the entry of its range.
    EXPECT_EQ(found_id(t, FakeNode("Reshape", "", 4, {TESS_ELEMENT_FLOAT32})), "reshape-1");
    EXPECT_EQ(found_id(t, FakeNode("Reshape", "", 5, {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_INT64})), "reshape-5");
    EXPECT_EQ(found_id(t, FakeNode("Reshape", "", 19, {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_INT64})), "reshape-5");
    // Absent inputs are not type-checked.
    EXPECT_EQ(found_id(t, FakeNode("Reshape", "", 13, {TESS_ELEMENT_FLOAT32, -1})), "reshape-5");
}

TEST(CudaOpTable, DeclinesAWrongTypeNamingOpOpsetAndTypes) {
    const OpTable t = sample_table();
    std::string why;
    EXPECT_EQ(found_id(t, FakeNode("Relu", "", 13, {TESS_ELEMENT_INT64}), &why), "");
    EXPECT_NE(why.find("Relu"), std::string::npos) << why;
    EXPECT_NE(why.find("opset 13"), std::string::npos) << why;
    EXPECT_NE(why.find("input 0 is int64"), std::string::npos) << why;
    EXPECT_NE(why.find("float, float16"), std::string::npos) << why;

    EXPECT_EQ(found_id(t, FakeNode("Reshape", "", 13, {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT32}), &why), "");
    EXPECT_NE(why.find("Reshape (opset 13)"), std::string::npos) << why;
    EXPECT_NE(why.find("input 1 is float;"), std::string::npos) << why;
    EXPECT_NE(why.find("int64"), std::string::npos) << why;
}

TEST(CudaOpTable, DeclinesAnOpsetOutsideEveryRange) {
    const OpTable t = sample_table();
    std::string why;
    EXPECT_EQ(found_id(t, FakeNode("Gelu", "", 17, {TESS_ELEMENT_FLOAT32}), &why), "");
    EXPECT_NE(why.find("no CUDA kernel for Gelu at opset 17"), std::string::npos) << why;
    EXPECT_NE(why.find("opsets 20+"), std::string::npos) << why;
    EXPECT_NE(why.find("inputs float)"), std::string::npos) << why;
}

TEST(CudaOpTable, DeclinesUnknownOperatorsAndDomains) {
    const OpTable t = sample_table();
    std::string why;
    EXPECT_EQ(found_id(t, FakeNode("Resize", "", 13, {TESS_ELEMENT_FLOAT32, -1, TESS_ELEMENT_FLOAT32}), &why), "");
    EXPECT_EQ(why, "no CUDA kernel for Resize (opset 13; inputs float, none, float)");
    EXPECT_EQ(found_id(t, FakeNode("Relu", "com.example", 1, {TESS_ELEMENT_FLOAT32}), &why), "");
    EXPECT_EQ(why, "no CUDA kernel for com.example:Relu (opset 1; inputs float)");
}

}  // namespace
}  // namespace tessera::cuda::ops
