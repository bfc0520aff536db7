// Model loading: valid models, malformed ones (each error names the node or value and the problem), external data
// confined to the model's directory, initializer encodings and overridable inputs.
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/status.h"
#include "model/loader.h"
#include "test_support.h"

namespace fs = std::filesystem;
using tessera::Error;
using tessera::load_model_bytes;
using tessera::test::ModelBuilder;

namespace {

ModelBuilder relu_model() {
    ModelBuilder b;
    b.input("x", {2, 3}).output("y", {2, 3});
    b.node("Relu", {"x"}, {"y"}, "relu");
    return b;
}

std::string load_error(const std::string& bytes, std::optional<fs::path> dir = std::nullopt) {
    try {
        load_model_bytes(bytes.data(), bytes.size(), std::move(dir));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("tessera-test-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(reinterpret_cast<uintptr_t>(this)));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

void write_file(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ModelBuilder external_model(const std::string& location) {
    ModelBuilder b;
    b.input("x", {4}).output("y", {4});
    auto& w = b.initializer("w", {4}, {});
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* entry = w.add_external_data();
    entry->set_key("location");
    entry->set_value(location);
    b.node("Add", {"x", "w"}, {"y"}, "add");
    return b;
}

}  // namespace

TEST(Loader, LoadsAValidModel) {
    auto bytes = relu_model().bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
    ASSERT_EQ(model.graph.nodes.size(), 1u);
    EXPECT_EQ(model.graph.nodes[0].op_type, "Relu");
    EXPECT_EQ(model.graph.inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(model.graph.opset_of(""), 13);
    EXPECT_EQ(model.graph.types.at("x").dims, (std::vector<int64_t>{2, 3}));
}

TEST(Loader, RejectsBytesThatAreNotAModel) {
    std::string garbage = "this is not a protobuf \xff\xff\xff";
    EXPECT_NE(load_error(garbage).find("not a valid ONNX model"), std::string::npos);
}

TEST(Loader, RejectsUnsupportedIrVersions) {
    auto b = relu_model();
    b.model.set_ir_version(2);
    EXPECT_NE(load_error(b.bytes()).find("IR version 2"), std::string::npos);
    b.model.set_ir_version(15);
    EXPECT_NE(load_error(b.bytes()).find("IR version 15"), std::string::npos);
    for (int ir = 3; ir <= 14; ++ir) {
        b.model.set_ir_version(ir);
        EXPECT_EQ(load_error(b.bytes()), "") << "IR " << ir;
    }
}

TEST(Loader, NamesTheNodeThatReadsAnUnknownValue) {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1});
    b.node("Add", {"x", "missing"}, {"y"}, "the_adder");
    std::string error = load_error(b.bytes());
    EXPECT_NE(error.find("the_adder"), std::string::npos) << error;
    EXPECT_NE(error.find("missing"), std::string::npos) << error;
}

TEST(Loader, RejectsCyclesAndDoubleDefinitions) {
    ModelBuilder cycle;
    cycle.input("x", {1}).output("b", {1});
    cycle.node("Add", {"x", "b"}, {"a"}, "first");
    cycle.node("Relu", {"a"}, {"b"}, "second");
    EXPECT_NE(load_error(cycle.bytes()).find("cycle"), std::string::npos);

    ModelBuilder twice;
    twice.input("x", {1}).output("y", {1});
    twice.node("Relu", {"x"}, {"y"}, "one");
    twice.node("Relu", {"x"}, {"y"}, "two");
    EXPECT_NE(load_error(twice.bytes()).find("already defined"), std::string::npos);
}

TEST(Loader, RejectsUnimportedDomainsAndEmptyOpTypes) {
    auto b = relu_model();
    b.graph->mutable_node(0)->set_domain("com.example");
    std::string error = load_error(b.bytes());
    EXPECT_NE(error.find("com.example"), std::string::npos) << error;
    EXPECT_NE(error.find("relu"), std::string::npos) << error;

    auto c = relu_model();
    c.graph->mutable_node(0)->set_op_type("");
    EXPECT_NE(load_error(c.bytes()).find("no op_type"), std::string::npos);
}

TEST(Loader, RejectsInitializersWhoseDataDoesNotMatchTheShape) {
    ModelBuilder b;
    b.input("x", {3}).output("y", {3});
    b.initializer("w", {3}, {1.0f, 2.0f});
    b.node("Add", {"x", "w"}, {"y"});
    EXPECT_NE(load_error(b.bytes()).find("initializer 'w'"), std::string::npos);
}

TEST(Loader, ReadsRawAndTypedInitializers) {
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.initializer("typed", {2}, {1.5f, -2.0f});
    auto* raw = b.graph->add_initializer();
    raw->set_name("raw");
    raw->set_data_type(onnx::TensorProto::INT64);
    raw->add_dims(2);
    int64_t values[2] = {7, -9};
    raw->set_raw_data(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
    b.node("Add", {"x", "typed"}, {"y"});
    b.node("Identity", {"raw"}, {"r"});
    auto bytes = b.bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
    const auto& typed = *model.graph.initializers.at("typed");
    EXPECT_EQ(static_cast<const float*>(typed.data)[1], -2.0f);
    const auto& r = *model.graph.initializers.at("raw");
    EXPECT_EQ(static_cast<const int64_t*>(r.data)[1], -9);
}

// float6 (IR 14): raw_data holds the packed bit stream, four elements in three bytes; int32_data one code per element.
TEST(Loader, ReadsFloat6InitializersFromRawAndInt32Data) {
    const std::vector<int32_t> codes{0x3F, 0x2A, 0x15, 0x33, 0x0C};
    const std::string packed("\xBF\x5A\xCD\x0C", 4);  // onnx.numpy_helper._pack_6bit of the codes
    for (int32_t type : {TESS_ELEMENT_FLOAT6E2M3, TESS_ELEMENT_FLOAT6E3M2}) {
        SCOPED_TRACE(type);
        ModelBuilder b(28, 14);
        b.input("x", {2}).output("y", {2});
        b.node("Relu", {"x"}, {"y"});
        auto add = [&](const std::string& name) {
            auto* t = b.graph->add_initializer();
            t->set_name(name);
            t->set_data_type(type);
            t->add_dims(static_cast<int64_t>(codes.size()));
            b.node("Identity", {name}, {name + "_out"});
            return t;
        };
        add("raw")->set_raw_data(packed);
        auto* typed = add("typed");
        for (int32_t code : codes) typed->add_int32_data(code == 0x2A ? code | 0x7fc0 : code);  // high bits ignored
        auto bytes = b.bytes();
        auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
        for (const char* name : {"raw", "typed"}) {
            const auto& value = *model.graph.initializers.at(name);
            EXPECT_EQ(value.element_type, type);
            EXPECT_EQ(std::string(static_cast<const char*>(value.data), value.byte_size), packed) << name;
        }
        typed->mutable_int32_data()->RemoveLast();  // one entry per element, not per packed byte
        EXPECT_NE(load_error(b.bytes()).find("initializer 'typed': int32_data holds 4 entries, 5 expected"),
                  std::string::npos);
        typed->clear_int32_data();
        typed->set_raw_data(packed.substr(0, 3));
        EXPECT_NE(load_error(b.bytes()).find("raw_data holds 3 bytes, 4 expected"), std::string::npos);
    }
}

TEST(Loader, InitializersListedAsInputsAreOverridableFromIr4) {
    ModelBuilder b(13, 8);
    b.input("x", {2}).input("w", {2}).output("y", {2});
    b.initializer("w", {2}, {1.0f, 1.0f});
    b.node("Add", {"x", "w"}, {"y"});
    auto bytes = b.bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
    EXPECT_TRUE(model.graph.is_graph_input("w"));
    EXPECT_FALSE(model.graph.is_constant("w"));

    b.model.set_ir_version(3);  // IR 3 lists every weight as an input: they are constants
    bytes = b.bytes();
    auto old = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
    EXPECT_FALSE(old.graph.is_graph_input("w"));
    EXPECT_TRUE(old.graph.is_constant("w"));
}

TEST(Loader, ReadsExternalDataInsideTheModelDirectory) {
    TempDir dir;
    float weights[4] = {1, 2, 3, 4};
    write_file(dir.path / "weights.bin", std::string(reinterpret_cast<const char*>(weights), sizeof(weights)));
    auto bytes = external_model("weights.bin").bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), dir.path);
    EXPECT_EQ(static_cast<const float*>(model.graph.initializers.at("w")->data)[3], 4.0f);
}

TEST(Loader, RefusesExternalDataOutsideTheModelDirectory) {
    TempDir dir;
    fs::create_directories(dir.path / "model");
    float weights[4] = {1, 2, 3, 4};
    std::string blob(reinterpret_cast<const char*>(weights), sizeof(weights));
    write_file(dir.path / "outside.bin", blob);
    fs::create_symlink(dir.path / "outside.bin", dir.path / "model" / "link.bin");

    EXPECT_NE(load_error(external_model("../outside.bin").bytes(), dir.path / "model").find("leaves the model directory"),
              std::string::npos);
    EXPECT_NE(load_error(external_model((dir.path / "outside.bin").string()).bytes(), dir.path / "model")
                  .find("relative path"),
              std::string::npos);
    EXPECT_NE(load_error(external_model("link.bin").bytes(), dir.path / "model").find("outside the model directory"),
              std::string::npos);
    EXPECT_NE(load_error(external_model("weights.bin").bytes(), std::nullopt).find("without a base directory"),
              std::string::npos);
}

// What a path cannot show: a hard link to a file outside the model directory, a FIFO or device that would block or
// never end, and offsets written as negative numbers (which strtoull wraps around).
TEST(Loader, RefusesHardLinksDevicesAndNegativeOffsetsInExternalData) {
    TempDir dir;
    fs::create_directories(dir.path / "model");
    float weights[4] = {1, 2, 3, 4};
    write_file(dir.path / "outside.bin", std::string(reinterpret_cast<const char*>(weights), sizeof(weights)));
    fs::create_hard_link(dir.path / "outside.bin", dir.path / "model" / "hard.bin");
    EXPECT_NE(load_error(external_model("hard.bin").bytes(), dir.path / "model").find("hard links"), std::string::npos);

    ASSERT_EQ(::mkfifo((dir.path / "model" / "fifo.bin").c_str(), 0600), 0);
    EXPECT_NE(load_error(external_model("fifo.bin").bytes(), dir.path / "model").find("not a regular file"),
              std::string::npos);

    write_file(dir.path / "model" / "w.bin", std::string(reinterpret_cast<const char*>(weights), sizeof(weights)));
    for (const char* offset : {"-18446744073709551615", "-1", " 1", "+1", "1e3", "18446744073709551616", ""}) {
        auto b = external_model("w.bin");
        auto* entry = b.model.mutable_graph()->mutable_initializer(0)->add_external_data();
        entry->set_key("offset");
        entry->set_value(offset);
        EXPECT_NE(load_error(b.bytes(), dir.path / "model").find("not a non-negative 64-bit number"), std::string::npos)
            << "offset '" << offset << "'";
    }
    EXPECT_EQ(load_error(external_model("w.bin").bytes(), dir.path / "model"), "");
}

// A Constant (or any tensor attribute) may keep its value in an external file inside the model directory.
TEST(Loader, ReadsExternalDataOfTensorAttributes) {
    TempDir dir;
    float weights[4] = {1, 2, 3, 4};
    write_file(dir.path / "c.bin", std::string(reinterpret_cast<const char*>(weights), sizeof(weights)));
    ModelBuilder b;
    b.output("y", {4});
    auto& node = b.node("Constant", {}, {"y"}, "const");
    auto* attr = node.add_attribute();
    attr->set_name("value");
    attr->set_type(onnx::AttributeProto::TENSOR);
    auto* t = attr->mutable_t();
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(4);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* entry = t->add_external_data();
    entry->set_key("location");
    entry->set_value("c.bin");
    auto bytes = b.bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), dir.path);
    const onnx::TensorProto& loaded = model.graph.nodes.at(0).attribute("value")->t();
    EXPECT_NE(loaded.data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_EQ(loaded.raw_data(), std::string(reinterpret_cast<const char*>(weights), sizeof(weights)));
    EXPECT_NE(load_error(bytes, std::nullopt).find("without a base directory"), std::string::npos);
}

// libonnx (1.12: opset 17) infers a model importing a newer default opset where its older definitions give the
// same types and shapes: a Conv and a Relu are inferred up to opset 27; an AveragePool carrying opset 19's
// dilations, which the older definition does not know, is left uninferred; beyond the opsets surveyed (28) nothing
// is inferred.
TEST(Loader, InfersNewerOpsetsWhereTheOlderDefinitionsHold) {
    auto ints = [](onnx::NodeProto& node, const char* name, std::vector<int64_t> values) {
        auto* attr = node.add_attribute();
        attr->set_name(name);
        attr->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : values) attr->add_ints(v);
    };
    for (int64_t opset : {17, 18, 19, 21, 27, 28}) {
        ModelBuilder b(opset);
        b.input("x", {1, 3, 8, 8}).input("w", {4, 3, 3, 3}).output("y", {-1, -1, -1, -1});
        b.node("Conv", {"x", "w"}, {"t"});
        b.node("Relu", {"t"}, {"u"});
        auto& pool = b.node("AveragePool", {"u"}, {"y"});
        ints(pool, "kernel_shape", {2, 2});
        if (opset >= 19) ints(pool, "dilations", {2, 2});
        auto bytes = b.bytes();
        auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
        for (const char* value : {"t", "u"}) {
            const auto it = model.graph.types.find(value);
            if (opset > 27) {
                EXPECT_TRUE(it == model.graph.types.end() || !it->second.has_shape) << value << " opset " << opset;
                continue;
            }
            ASSERT_NE(it, model.graph.types.end()) << value << " opset " << opset;
            EXPECT_EQ(it->second.dims, (std::vector<int64_t>{1, 4, 6, 6})) << value << " opset " << opset;
        }
        // y: the model's own declaration (unknown dims) unless inferred.
        const auto y = model.graph.types.find("y");
        const bool y_inferred = y != model.graph.types.end() && y->second.has_shape &&
                                y->second.dims == std::vector<int64_t>{1, 4, 5, 5};
        EXPECT_EQ(y_inferred, opset < 19) << "opset " << opset;
    }
}

// From opset 19 a DequantizeLinear's output takes its scale's type: the older definition (always float32) is used
// only for a float32 scale; with a float16 one the output stays uninferred rather than wrongly float32.
TEST(Loader, InfersNewerDequantizeLinearOnlyWithFloatScales) {
    for (bool half : {false, true}) {
        ModelBuilder b(19);
        b.input("x", {2, 3}, onnx::TensorProto::UINT8).output("y", {-1, -1}, half ? onnx::TensorProto::FLOAT16
                                                                                   : onnx::TensorProto::FLOAT);
        auto& scale = b.initializer("scale", {}, {});
        if (half) {
            scale.set_data_type(onnx::TensorProto::FLOAT16);
            scale.add_int32_data(0x3c00);  // 1.0
        } else {
            scale.add_float_data(1.0f);
        }
        b.node("DequantizeLinear", {"x", "scale"}, {"d"});
        b.node("Relu", {"d"}, {"y"});
        auto bytes = b.bytes();
        auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
        const auto d = model.graph.types.find("d");
        if (half) {
            EXPECT_TRUE(d == model.graph.types.end() || d->second.element_type != TESS_ELEMENT_FLOAT32);
        } else {
            ASSERT_NE(d, model.graph.types.end());
            EXPECT_EQ(d->second.element_type, TESS_ELEMENT_FLOAT32);
            EXPECT_EQ(d->second.dims, (std::vector<int64_t>{2, 3}));
        }
    }
}

// A tiny model that declares a huge tensor costs an error, not the tensor's memory: sizes are checked against the
// data present before anything is allocated.
TEST(Loader, ChecksDeclaredSizesBeforeAllocating) {
    for (bool raw : {true, false}) {
        ModelBuilder b;
        b.input("x", {1}).output("y", {1});
        auto& w = b.initializer("w", {1 << 28}, {});
        if (raw) w.set_raw_data(std::string(16, '\0'));
        else w.add_float_data(1.0f);
        b.node("Add", {"x", "w"}, {"y"}, "add");
        const std::string error = load_error(b.bytes());
        const char* expected = raw ? "raw_data holds 16 bytes, 1073741824 expected"
                                   : "float_data holds 1 entries, 268435456 expected";
        EXPECT_NE(error.find(expected), std::string::npos)
            << error;
    }
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    EXPECT_LT(usage.ru_maxrss, 512 * 1024) << "peak RSS in KiB";  // 2^28 floats would be 1 GiB
}

TEST(Loader, LoadsFromFileAndReportsMissingFiles) {
    TempDir dir;
    write_file(dir.path / "m.onnx", relu_model().bytes());
    EXPECT_EQ(tessera::load_model_file(dir.path / "m.onnx").graph.nodes.size(), 1u);
    try {
        tessera::load_model_file(dir.path / "absent.onnx");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_NOT_FOUND);
    }
}

// A directory, a FIFO (which must not block the open) and an endless device are refused as not being model files.
TEST(Loader, RefusesFilesThatAreNotRegular) {
    TempDir dir;
    ASSERT_EQ(::mkfifo((dir.path / "fifo.onnx").c_str(), 0600), 0);
    const std::pair<std::filesystem::path, const char*> cases[] = {
        {dir.path, "is a directory"}, {dir.path / "fifo.onnx", "is not a regular file"},
        {"/dev/zero", "is not a regular file"}};
    for (const auto& [path, why] : cases) {
        try {
            tessera::load_model_file(path);
            ADD_FAILURE() << "expected an error for " << path;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), TESS_STATUS_INVALID_ARGUMENT) << path;
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
    }
}

TEST(Loader, InlinesModelLocalFunctions) {
    ModelBuilder b;
    auto* local = b.model.add_opset_import();
    local->set_domain("local");
    local->set_version(1);
    // LeakyAdd(a, b; alpha) = LeakyRelu(a + b, alpha)
    auto* fn = b.model.add_functions();
    fn->set_name("LeakyAdd");
    fn->set_domain("local");
    fn->add_input("a");
    fn->add_input("b");
    fn->add_output("out");
    fn->add_attribute("alpha");
    auto* op = fn->add_opset_import();
    op->set_domain("");
    op->set_version(13);
    auto* add = fn->add_node();
    add->set_op_type("Add");
    add->add_input("a");
    add->add_input("b");
    add->add_output("sum");
    auto* leaky = fn->add_node();
    leaky->set_op_type("LeakyRelu");
    leaky->add_input("sum");
    leaky->add_output("out");
    auto* ref = leaky->add_attribute();
    ref->set_name("alpha");
    ref->set_type(onnx::AttributeProto::FLOAT);
    ref->set_ref_attr_name("alpha");

    b.input("x", {2}).input("y", {2}).output("z", {2});
    auto& call = b.node("LeakyAdd", {"x", "y"}, {"z"}, "call");
    call.set_domain("local");
    auto* alpha = call.add_attribute();
    alpha->set_name("alpha");
    alpha->set_type(onnx::AttributeProto::FLOAT);
    alpha->set_f(0.5f);

    auto bytes = b.bytes();
    auto model = load_model_bytes(bytes.data(), bytes.size(), std::nullopt);
    ASSERT_EQ(model.graph.nodes.size(), 2u);
    EXPECT_EQ(model.graph.nodes[0].op_type, "Add");
    EXPECT_EQ(model.graph.nodes[1].op_type, "LeakyRelu");
    EXPECT_EQ(model.graph.nodes[1].outputs[0], "z");
    ASSERT_NE(model.graph.nodes[1].attribute("alpha"), nullptr);
    EXPECT_FLOAT_EQ(model.graph.nodes[1].attribute("alpha")->f(), 0.5f);
}
