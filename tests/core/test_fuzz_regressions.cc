// Regression tests for what the fuzzers (tests/fuzz) found.  Each test names the harness and the report; under the
// sanitizer builds (scripts/sanitize.sh) they fail the way the fuzzer did, in the normal build they check the
// behaviour that replaced the fault.
#include <onnx/onnx_pb.h>

#include <cstring>
#include <limits>

#include "common/status.h"
#include "model/guarded_inference.h"
#include "model/tensor_proto.h"
#include "test_support.h"

using tessera::ExternalDataPolicy;
using tessera::tensor_from_proto;

// fuzz_tensor, UBSan: "null pointer passed as argument 2" (memcpy) in tensor_from_proto for an empty tensor whose
// typed field (float_data, int64_data, ...) holds no values and so has no storage.
TEST(FuzzRegressions, EmptyTensorsWithEmptyTypedFields) {
    // INT4 by Tessera's number: the onnx 1.12 headers predate it.
    for (int type : std::initializer_list<int>{onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE,
                                               onnx::TensorProto::INT64, onnx::TensorProto::INT32,
                                               onnx::TensorProto::UINT64, onnx::TensorProto::FLOAT16,
                                               TESS_ELEMENT_INT4, onnx::TensorProto::COMPLEX64}) {
        for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 0, 2}}) {
            onnx::TensorProto proto;
            proto.set_data_type(type);
            for (int64_t d : dims) proto.add_dims(d);
            tessera::ValuePtr value = tensor_from_proto(proto, ExternalDataPolicy{}, "empty");
            ASSERT_NE(value, nullptr);
            EXPECT_EQ(value->element_type, type);
            EXPECT_EQ(value->dims, dims);
            EXPECT_EQ(value->byte_size, 0u);
        }
    }
}

namespace {

using namespace tessera::test;

// Session creation from model bytes through the C API (the fuzz_model harness's path): the error message, or ""
// when the session was created.
std::string create_error(const ModelBuilder& b) {
    EnvPtr env = make_env(plugin_dir().string());
    const std::string bytes = b.bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    tess_session_release(session);
    return status ? tess_status_message(status.get()) : "";
}

onnx::AttributeProto& add_attribute(onnx::NodeProto& node, const std::string& name, onnx::AttributeProto::AttributeType type) {
    auto* attr = node.add_attribute();
    attr->set_name(name);
    attr->set_type(type);
    return *attr;
}

// Creates a session from `b` and runs it on `inputs` (named as `names`): the run's error message; "" when the
// model was refused at creation (as good as an error at run time) and "(no error)" when the run succeeded.
std::string run_error(const ModelBuilder& b, std::vector<const char*> names, std::vector<const TessValue*> inputs) {
    EnvPtr env = make_env(plugin_dir().string());
    const std::string bytes = b.bytes();
    TessSession* raw = nullptr;
    StatusPtr created(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &raw));
    SessionPtr session(raw);
    if (created) return "";
    TessValue* out = nullptr;
    StatusPtr status(tess_session_run(session.get(), names.data(), inputs.data(), inputs.size(), nullptr, 1, &out));
    ValuePtr result(out);
    return status ? tess_status_message(status.get()) : "(no error)";
}

// An int64 initializer (ModelBuilder's are float).
void add_int64_initializer(ModelBuilder& b, const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = b.graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
}

}  // namespace

// fuzz_model, ASan: SEGV in libonnx's convPoolShapeInference (onnx 1.12) for a ConvInteger whose data has rank 3
// and whose weights have rank 4: the kernel taken from the weights indexed the data's dilations out of bounds.
TEST(FuzzRegressions, ConvWithMismatchedRanksDoesNotReachOnnxInference) {
    for (const char* op : {"ConvInteger", "Conv"}) {
        const int32_t type = std::string(op) == "Conv" ? onnx::TensorProto::FLOAT : onnx::TensorProto::UINT8;
        ModelBuilder b(10, 5);
        b.input("x", {-1, 3, 3}, type).input("w", {1, 1, 2, 2}, type);
        b.output("y", {1, 1, 2, 2}, std::string(op) == "Conv" ? type : onnx::TensorProto::INT32);
        b.node(op, {"x", "w"}, {"y"});
        create_error(b);  // an error or not: the point is that the process survives
    }
    // The guard leaves well-formed convolutions to libonnx: their output shape is still inferred.
    ModelBuilder b;
    b.input("x", {1, 3, 8, 8}).input("w", {4, 3, 3, 3}).output("y", {-1, -1, -1, -1});
    b.node("Conv", {"x", "w"}, {"t"});
    b.node("Relu", {"t"}, {"y"});
    onnx::ModelProto model = b.model;
    tessera::infer_shapes_guarded(model);
    bool inferred = false;
    for (const auto& info : model.graph().value_info())
        if (info.name() == "t" && info.type().tensor_type().shape().dim_size() == 4 &&
            info.type().tensor_type().shape().dim(3).dim_value() == 6)
            inferred = true;
    EXPECT_TRUE(inferred) << model.graph().DebugString();
}

// fuzz_model, ASan: SEGV (address 0xf0) in libonnx's ScanInferenceFunctionOpset9 for a Scan without its required
// num_scan_inputs attribute (the fuzzer had changed one letter of its name).
TEST(FuzzRegressions, ScanWithoutRequiredAttributeDoesNotReachOnnxInference) {
    ModelBuilder b(9, 4);
    b.input("init", {1}).input("xs", {3, 1}).output("final", {1}).output("ys", {3, 1});
    auto& scan = b.node("Scan", {"init", "xs"}, {"final", "ys"});
    add_attribute(scan, "num_scan_inputz", onnx::AttributeProto::INT).set_i(1);
    onnx::GraphProto& body = *add_attribute(scan, "body", onnx::AttributeProto::GRAPH).mutable_g();
    body.set_name("body");
    ModelBuilder::set_type(body.add_input(), "acc", onnx::TensorProto::FLOAT, {1});
    ModelBuilder::set_type(body.add_input(), "x", onnx::TensorProto::FLOAT, {1});
    ModelBuilder::set_type(body.add_output(), "acc_out", onnx::TensorProto::FLOAT, {1});
    ModelBuilder::set_type(body.add_output(), "y", onnx::TensorProto::FLOAT, {1});
    auto* add = body.add_node();
    add->set_op_type("Add");
    add->add_input("acc");
    add->add_input("x");
    add->add_output("acc_out");
    auto* copy = body.add_node();
    copy->set_op_type("Identity");
    copy->add_input("acc_out");
    copy->add_output("y");
    EXPECT_NE(create_error(b), "");  // Tessera's Scan kernel reports the missing attribute
}

// fuzz_model, ASan: heap-buffer-overflow in the Gradient expansion (optimizer/expand_gradient.cc) reading the second
// input of a Mul node that had only one.
TEST(FuzzRegressions, GradientThroughANodeWithTooFewInputsIsAnError) {
    ModelBuilder b(12, 7);
    auto* training = b.model.add_opset_import();
    training->set_domain("ai.onnx.preview.training");
    training->set_version(1);
    b.input("a", {2}).input("b", {2}).output("d", {2}).output("dd_da", {2});
    b.node("Mul", {"a"}, {"d"});
    auto& gradient = b.node("Gradient", {"a", "b"}, {"dd_da"});
    gradient.set_domain("ai.onnx.preview.training");
    add_attribute(gradient, "xs", onnx::AttributeProto::STRINGS).add_strings("a");
    add_attribute(gradient, "y", onnx::AttributeProto::STRING).set_s("d");
    EXPECT_NE(create_error(b).find("needs 2 input(s), it has 1"), std::string::npos) << create_error(b);
}

// fuzz_model, UBSan: "load of null pointer of type 'const float'" in the CPU provider's unary kernels: an Acosh
// whose input was a sequence of float tensors (kernels are chosen by element type) read the empty tensor the
// executor keeps for a non-tensor value.  That stand-in now has no elements, so such a kernel reads nothing.
TEST(FuzzRegressions, SequenceWhereATensorIsExpectedReadsNoMemory) {
    ModelBuilder b(12, 7);
    auto* x = b.graph->add_input();
    x->set_name("x");
    auto* elem = x->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
    elem->set_elem_type(onnx::TensorProto::FLOAT);
    b.output("y", {-1});
    b.node("Acosh", {"x"}, {"y"});
    EnvPtr env = make_env(plugin_dir().string());
    const std::string bytes = b.bytes();
    TessSession* raw = nullptr;
    StatusPtr created(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &raw));
    SessionPtr session(raw);
    if (created) return;  // refusing the model outright is as good
    int64_t dims[] = {4};
    TessValue* item = nullptr;
    TESS_ASSERT_OK(tess_value_create_tensor(TESS_ELEMENT_FLOAT32, dims, 1, &item));
    TessValue* sequence = nullptr;
    TESS_ASSERT_OK(tess_value_create_sequence(TESS_ELEMENT_FLOAT32, &item, 1, &sequence));
    ValuePtr owner(sequence);
    const char* name = "x";
    const TessValue* inputs[] = {sequence};
    TessValue* out = nullptr;
    StatusPtr status(tess_session_run(session.get(), &name, inputs, 1, nullptr, 1, &out));
    ValuePtr result(out);
    // The kernel sees a tensor without elements in place of the sequence (kernels that take sequences read the value
    // itself), so it reads no memory: an error or an empty result, never a NULL read.
    if (status == nullptr) {
        EXPECT_EQ(tess_tensor_element_count(result.get()), 0u);
    }
}

// fuzz_model, UBSan and LeakSanitizer: names reach providers as C strings, so a name with a NUL byte was read as
// another one.  The model above came with the op type "Acosh\0\0\0\tap" (run as Acosh); another had a Gradient node
// named "\x01\0\0\x04radient", whose expansion names its values after the node, so that every generated value
// reached the CPU provider as "\x01": two steps wrote one value and its first buffer leaked.  Such models are
// refused when loaded.
TEST(FuzzRegressions, NamesWithNulBytesAreRefused) {
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node(std::string("Relu\0x", 6), {"x"}, {"y"});
    EXPECT_NE(create_error(b).find("contains a NUL byte"), std::string::npos) << create_error(b);
    ModelBuilder c;
    c.input(std::string("x\0y", 3), {2}).output("y", {2});
    c.node("Relu", {std::string("x\0y", 3)}, {"y"});
    EXPECT_NE(create_error(c).find("contains a NUL byte"), std::string::npos) << create_error(c);
}

// The same leak through a name collision instead of a NUL byte: the Gradient expansion named its values
// "<node>/grad<index>/v<n>" without looking at the model's names, so a model value of that name got a second
// producer.  Generated names now avoid the model's, and the CPU provider refuses a value written twice.
TEST(FuzzRegressions, GradientExpansionAvoidsTheModelsNames) {
    ModelBuilder b(12, 7);
    auto* training = b.model.add_opset_import();
    training->set_domain("ai.onnx.preview.training");
    training->set_version(1);
    b.input("a", {2}).input("b", {2}).output("c", {2}).output("G/grad2/v0", {2}).output("dc_da", {2});
    b.node("Add", {"a", "b"}, {"c"});
    b.node("Neg", {"c"}, {"G/grad2/v0"});
    auto& gradient = b.node("Gradient", {"a", "b"}, {"dc_da"}, "G");  // node 2: its values are "G/grad2/v<n>"
    gradient.set_domain("ai.onnx.preview.training");
    add_attribute(gradient, "xs", onnx::AttributeProto::STRINGS).add_strings("a");
    add_attribute(gradient, "y", onnx::AttributeProto::STRING).set_s("c");
    EnvPtr env = make_env(plugin_dir().string());
    const std::string bytes = b.bytes();
    TessSession* raw = nullptr;
    TESS_ASSERT_OK(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &raw));
    SessionPtr session(raw);
    auto a = make_float_tensor({2}, {1.0f, 2.0f});
    auto bv = make_float_tensor({2}, {3.0f, 5.0f});
    const char* names[] = {"a", "b"};
    const TessValue* inputs[] = {a.get(), bv.get()};
    TessValue* outputs[3] = {};
    TESS_ASSERT_OK(tess_session_run(session.get(), names, inputs, 2, nullptr, 3, outputs));
    ValuePtr c(outputs[0]), negated(outputs[1]), grad(outputs[2]);
    EXPECT_EQ(floats_of(negated.get()), (std::vector<float>{-4.0f, -7.0f}));
    EXPECT_EQ(floats_of(grad.get()), (std::vector<float>{1.0f, 1.0f}));
}

// fuzz_model, ASan: heap-buffer-overflow (memcpy) in the CPU provider's ScatterND for updates of another element type
// than data (bool updates, float data): both were walked at data's element size.  Such updates are an error now.
TEST(FuzzRegressions, ScatterUpdatesOfAnotherTypeAreAnError) {
    for (const char* op : {"ScatterND", "ScatterElements"}) {
        const bool nd = std::string(op) == "ScatterND";
        const std::vector<int64_t> index_dims = nd ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 4, 4};
        const std::vector<int64_t> update_dims = nd ? std::vector<int64_t>{2, 4, 4} : std::vector<int64_t>{1, 4, 4};
        ModelBuilder b(13, 8);
        b.input("data", {4, 4, 4}).input("indices", index_dims, onnx::TensorProto::INT64);
        b.input("updates", update_dims, onnx::TensorProto::BOOL).output("y", {4, 4, 4});
        b.node(op, {"data", "indices", "updates"}, {"y"});
        ValuePtr data = make_float_tensor({4, 4, 4}, std::vector<float>(64, 1.0f));
        TessValue* indices = nullptr;
        TESS_ASSERT_OK(tess_value_create_tensor(TESS_ELEMENT_INT64, index_dims.data(), index_dims.size(), &indices));
        ValuePtr indices_owner(indices);
        int64_t* index_data = static_cast<int64_t*>(tess_tensor_data(indices));
        for (size_t i = 0; i < tess_tensor_element_count(indices); ++i) index_data[i] = int64_t(i % 2);
        TessValue* updates = nullptr;
        TESS_ASSERT_OK(tess_value_create_tensor(TESS_ELEMENT_BOOL, update_dims.data(), update_dims.size(), &updates));
        ValuePtr updates_owner(updates);
        const std::string error = run_error(b, {"data", "indices", "updates"}, {data.get(), indices, updates});
        if (error.empty()) continue;  // refused at creation
        EXPECT_NE(error.find("updates are bool but data is float"), std::string::npos) << op << ": " << error;
    }
}

// fuzz_model, UBSan: "signed integer overflow: 15 * 9223372036854775807" in the CPU provider's Reshape, multiplying
// the requested dimensions.  A requested shape with more elements than 64 bits count is an error now.
TEST(FuzzRegressions, ReshapeToAShapeTooLargeToCountIsAnError) {
    ModelBuilder b(13, 8);
    b.input("x", {15}).output("y", {-1, -1});
    add_int64_initializer(b, "shape", {15, std::numeric_limits<int64_t>::max()});
    b.node("Reshape", {"x", "shape"}, {"y"});
    ValuePtr x = make_float_tensor({15}, std::vector<float>(15, 1.0f));
    const std::string error = run_error(b, {"x"}, {x.get()});
    if (!error.empty()) {
        EXPECT_NE(error.find("more elements than 64 bits count"), std::string::npos) << error;
    }
}

// Found while fixing the Reshape overflow above: an output shape whose element count wraps 64 bits (Expand to
// [2^32, 2^32, 16]) got a buffer of the wrapped size.  Every CPU output shape is checked before its buffer is made.
TEST(FuzzRegressions, OutputShapesTooLargeToCountAreAnError) {
    ModelBuilder b(13, 8);
    b.input("x", {1}).output("y", {-1, -1, -1});
    add_int64_initializer(b, "shape", {int64_t{1} << 32, int64_t{1} << 32, 16});
    b.node("Expand", {"x", "shape"}, {"y"});
    ValuePtr x = make_float_tensor({1}, {1.0f});
    const std::string error = run_error(b, {"x"}, {x.get()});
    if (!error.empty()) {
        EXPECT_NE(error.find("more elements than memory can hold"), std::string::npos) << error;
    }
}

// fuzz_model, UBSan: "null pointer passed as argument 1" (memcpy) in the CPU provider's Scan, copying the empty
// slices of a scan input with a zero-length dimension into an empty buffer.  Empty slices copy nothing now.
TEST(FuzzRegressions, ScanOverEmptySlicesCopiesNothing) {
    ModelBuilder b(13, 8);
    b.input("x", {3, 0}).output("y", {3, 0});
    onnx::NodeProto& scan = *b.graph->add_node();
    scan.set_op_type("Scan");
    scan.add_input("x");
    scan.add_output("y");
    add_attribute(scan, "num_scan_inputs", onnx::AttributeProto::INT).set_i(1);
    onnx::GraphProto& body = *add_attribute(scan, "body", onnx::AttributeProto::GRAPH).mutable_g();
    body.set_name("body");
    for (const char* name : {"slice", "copy"}) {
        onnx::ValueInfoProto& v = std::string(name) == "slice" ? *body.add_input() : *body.add_output();
        v.set_name(name);
        auto* t = v.mutable_type()->mutable_tensor_type();
        t->set_elem_type(onnx::TensorProto::FLOAT);
        t->mutable_shape()->add_dim()->set_dim_value(0);
    }
    onnx::NodeProto& identity = *body.add_node();
    identity.set_op_type("Identity");
    identity.add_input("slice");
    identity.add_output("copy");
    ValuePtr x = make_float_tensor({3, 0}, {});
    const std::string error = run_error(b, {"x"}, {x.get()});
    EXPECT_TRUE(error.empty() || error == "(no error)") << error;
}

// fuzz_model, UBSan: "-inf is outside the range of representable values of type 'unsigned char'" in the CPU
// provider's ReduceLogSum over uint8 zeros: the log of a zero sum was cast to the integer type.  Integer results of
// the logarithmic and square-root reductions are converted without undefined behaviour now.
TEST(FuzzRegressions, IntegerLogReductionsOfZeroAreDefined) {
    for (const char* op : {"ReduceLogSum", "ReduceLogSumExp", "ReduceL2"}) {
        ModelBuilder b(13, 8);
        b.input("x", {2, 3}, onnx::TensorProto::UINT8).output("y", {-1}, onnx::TensorProto::UINT8);
        onnx::NodeProto& node = b.node(op, {"x"}, {"y"});
        add_attribute(node, "keepdims", onnx::AttributeProto::INT).set_i(0);
        add_attribute(node, "axes", onnx::AttributeProto::INTS).add_ints(1);
        const int64_t dims[] = {2, 3};
        TessValue* x = nullptr;
        TESS_ASSERT_OK(tess_value_create_tensor(TESS_ELEMENT_UINT8, dims, 2, &x));
        ValuePtr x_owner(x);
        std::memset(tess_tensor_data(x), 0, 6);
        const std::string error = run_error(b, {"x"}, {x});
        EXPECT_TRUE(error.empty() || error == "(no error)") << op << ": " << error;
    }
}
