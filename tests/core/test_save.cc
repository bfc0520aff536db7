// Saving a graph as an ONNX model (model/save.h) and the session option that does it after optimization: the file
// loads back into the same graph, large initializers go to external data when the model would be too large, and a
// file that cannot be written fails with a status naming the path.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/status.h"
#include "model/loader.h"
#include "model/save.h"
#include "test_support.h"

namespace fs = std::filesystem;
using tessera::Error;
using tessera::Graph;
using tessera::load_model_bytes;
using tessera::load_model_file;
using tessera::save_model_file;
using tessera::SaveModelOptions;
using tessera::test::ModelBuilder;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("tessera-save-test-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(reinterpret_cast<uintptr_t>(this)));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

// y = Gemm(x, w, b) + bias, z = Cast(x); w is 4 KiB, b and bias are small; a string constant rides along.
ModelBuilder sample_model(int64_t ir_version = 8) {
    ModelBuilder m(13, ir_version);
    m.input("x", {-1, 32}).output("y", {-1, 32}).output("z", {-1, 32}, onnx::TensorProto::INT64);
    std::vector<float> w(32 * 32);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3.0f;
    m.initializer("w", {32, 32}, w);
    m.initializer("b", {32}, std::vector<float>(32, 0.5f));
    m.input("bias", {32});  // an overridable initializer: an input with a default
    m.initializer("bias", {32}, std::vector<float>(32, -1.0f));
    auto* names = m.graph->add_initializer();
    names->set_name("labels");
    names->set_data_type(onnx::TensorProto::STRING);
    names->add_dims(2);
    names->add_string_data("cat");
    names->add_string_data(std::string("d\0g", 3));
    auto& gemm = m.node("Gemm", {"x", "w", "b"}, {"h"}, "gemm");
    auto* beta = gemm.add_attribute();
    beta->set_name("transB");
    beta->set_type(onnx::AttributeProto::INT);
    beta->set_i(1);
    m.node("Add", {"h", "bias"}, {"y"}, "add");
    auto& cast = m.node("Cast", {"x"}, {"z"}, "cast");
    auto* to = cast.add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::INT64);
    return m;
}

Graph load(const ModelBuilder& m) {
    const std::string bytes = m.bytes();
    return load_model_bytes(bytes.data(), bytes.size(), std::nullopt).graph;
}

onnx::ModelProto parse(const fs::path& path) {
    onnx::ModelProto model;
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(model.ParseFromIstream(&in)) << path;
    return model;
}

void expect_same_graph(const Graph& a, const Graph& b) {
    ASSERT_EQ(a.nodes.size(), b.nodes.size());
    for (size_t n = 0; n < a.nodes.size(); ++n) {
        EXPECT_EQ(a.nodes[n].name, b.nodes[n].name);
        EXPECT_EQ(a.nodes[n].op_type, b.nodes[n].op_type);
        EXPECT_EQ(a.nodes[n].domain, b.nodes[n].domain);
        EXPECT_EQ(a.nodes[n].inputs, b.nodes[n].inputs);
        EXPECT_EQ(a.nodes[n].outputs, b.nodes[n].outputs);
        ASSERT_EQ(a.nodes[n].attributes.size(), b.nodes[n].attributes.size());
        for (size_t k = 0; k < a.nodes[n].attributes.size(); ++k)
            EXPECT_EQ(a.nodes[n].attributes[k].SerializeAsString(), b.nodes[n].attributes[k].SerializeAsString());
    }
    EXPECT_EQ(a.inputs, b.inputs);
    EXPECT_EQ(a.outputs, b.outputs);
    EXPECT_EQ(a.opsets, b.opsets);
    ASSERT_EQ(a.initializers.size(), b.initializers.size());
    for (const auto& [name, value] : a.initializers) {
        ASSERT_TRUE(b.initializers.count(name)) << name;
        const TessValue& other = *b.initializers.at(name);
        EXPECT_EQ(value->element_type, other.element_type) << name;
        EXPECT_EQ(value->dims, other.dims) << name;
        EXPECT_EQ(value->strings, other.strings) << name;
        const size_t bytes = tessera::storage_bytes(value->element_type, value->element_count());
        if (bytes > 0) {
            EXPECT_EQ(std::memcmp(value->data, other.data, bytes), 0) << name;
        }
    }
    for (const std::string& io : a.inputs) {
        ASSERT_TRUE(b.types.count(io)) << io;
        EXPECT_EQ(a.types.at(io).element_type, b.types.at(io).element_type) << io;
        EXPECT_EQ(a.types.at(io).dims, b.types.at(io).dims) << io;
        EXPECT_EQ(a.types.at(io).dim_params, b.types.at(io).dim_params) << io;
    }
}

}  // namespace

TEST(SaveModel, RoundTripsTheGraph) {
    TempDir dir;
    const Graph graph = load(sample_model());
    const fs::path path = dir.path / "saved.onnx";
    save_model_file(graph, path);

    const onnx::ModelProto proto = parse(path);
    EXPECT_EQ(proto.producer_name(), "tessera");
    EXPECT_EQ(proto.producer_version(), tess_version());
    EXPECT_EQ(proto.ir_version(), 8);
    EXPECT_EQ(proto.graph().initializer_size(), 4);
    for (const auto& init : proto.graph().initializer()) {
        EXPECT_NE(init.data_location(), onnx::TensorProto::EXTERNAL);
        if (init.data_type() != onnx::TensorProto::STRING) {
            EXPECT_TRUE(init.has_raw_data()) << init.name();
        }
    }
    // The intermediate Gemm output is typed as value_info; graph outputs and inputs are not repeated there.
    bool h_typed = false;
    for (const auto& info : proto.graph().value_info()) {
        EXPECT_NE(info.name(), "y");
        EXPECT_NE(info.name(), "x");
        if (info.name() == "h") h_typed = info.type().tensor_type().elem_type() == onnx::TensorProto::FLOAT;
    }
    EXPECT_TRUE(h_typed);
    expect_same_graph(graph, load_model_file(path).graph);
}

TEST(SaveModel, RaisesOldIrVersionsToSeven) {
    TempDir dir;
    ModelBuilder m = sample_model(3);
    // IR 3 lists every initializer among the inputs; those are constants, and stay constants in IR 7.
    for (const char* name : {"w", "b", "labels"}) ModelBuilder::set_type(m.graph->add_input(), name, 1, {1});
    const Graph graph = load(m);
    const fs::path path = dir.path / "ir3.onnx";
    save_model_file(graph, path);
    const onnx::ModelProto proto = parse(path);
    EXPECT_EQ(proto.ir_version(), 7);
    const Graph reloaded = load_model_file(path).graph;
    EXPECT_EQ(reloaded.inputs, std::vector<std::string>{"x"});  // in IR 3 even "bias" is a constant
    EXPECT_TRUE(reloaded.is_constant("w"));
    EXPECT_TRUE(reloaded.is_constant("bias"));
}

TEST(SaveModel, LargeModelsKeepTheirLargerInitializersAsExternalData) {
    TempDir dir;
    const Graph graph = load(sample_model());
    const fs::path path = dir.path / "big.onnx";
    SaveModelOptions options;
    options.max_inline_bytes = 2000;  // the 4 KiB weight alone is over it
    save_model_file(graph, path, options);

    const fs::path data = dir.path / "big.onnx.data";
    ASSERT_TRUE(fs::exists(data));
    EXPECT_EQ(fs::file_size(data), 32u * 32u * 4u);
    const onnx::ModelProto proto = parse(path);
    for (const auto& init : proto.graph().initializer()) {
        if (init.name() == "w") {
            ASSERT_EQ(init.data_location(), onnx::TensorProto::EXTERNAL);
            EXPECT_FALSE(init.has_raw_data());
            std::map<std::string, std::string> entries;
            for (const auto& e : init.external_data()) entries[e.key()] = e.value();
            EXPECT_EQ(entries["location"], "big.onnx.data");
            EXPECT_EQ(entries["offset"], "0");
            EXPECT_EQ(entries["length"], "4096");
        } else {
            EXPECT_NE(init.data_location(), onnx::TensorProto::EXTERNAL) << init.name();  // under 1 KiB
        }
    }
    expect_same_graph(graph, load_model_file(path).graph);
}

// float6 initializers keep their packed bytes (4 elements in 3, the last group padded), inline and external.
TEST(SaveModel, RoundTripsFloat6Initializers) {
    TempDir dir;
    ModelBuilder m(28, 14);
    m.input("x", {2}).output("y", {2});
    m.node("Relu", {"x"}, {"y"});
    for (auto [name, type, count] : {std::tuple{"small", TESS_ELEMENT_FLOAT6E2M3, 7},
                                     std::tuple{"large", TESS_ELEMENT_FLOAT6E3M2, 2001}}) {
        auto* t = m.graph->add_initializer();
        t->set_name(name);
        t->set_data_type(type);
        t->add_dims(count);
        for (int i = 0; i < count; ++i) t->add_int32_data((i * 23 + 45) & 63);
        m.node("Identity", {name}, {std::string(name) + "_out"});
    }
    const Graph graph = load(m);
    EXPECT_EQ(graph.initializers.at("large")->byte_size, 1501u);  // ceil(2001 * 6 / 8)
    SaveModelOptions options;
    options.max_inline_bytes = 1000;
    const fs::path path = dir.path / "float6.onnx";
    save_model_file(graph, path, options);
    EXPECT_EQ(fs::file_size(dir.path / "float6.onnx.data"), 1501u);
    const onnx::ModelProto proto = parse(path);
    for (const auto& init : proto.graph().initializer())
        EXPECT_EQ(init.data_location() == onnx::TensorProto::EXTERNAL, init.name() == "large") << init.name();
    expect_same_graph(graph, load_model_file(path).graph);
}

TEST(SaveModel, TooLargeEvenWithExternalDataIsAClearError) {
    TempDir dir;
    const Graph graph = load(sample_model());
    SaveModelOptions options;
    options.max_inline_bytes = 100;
    try {
        save_model_file(graph, dir.path / "huge.onnx", options);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_NOT_IMPLEMENTED);
        EXPECT_NE(std::string(e.what()).find("huge.onnx"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("external data"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir.path / "huge.onnx"));
    EXPECT_FALSE(fs::exists(dir.path / "huge.onnx.data"));
}

TEST(SaveModel, UnwritablePathNamesThePath) {
    TempDir dir;
    const Graph graph = load(sample_model());
    const fs::path path = dir.path / "missing" / "out.onnx";
    try {
        save_model_file(graph, path);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_RUNTIME_ERROR);
        EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
    }
}

// Through the C API: the option saves the optimized graph (the Conv's bias Add folded away here), "" turns it off,
// and a write failure fails session creation naming the path.
TEST(SaveModel, SessionOptionSavesTheOptimizedGraph) {
    TempDir dir;
    auto env = tessera::test::make_env(tessera::test::plugin_dir().string());
    ModelBuilder m;
    m.input("x", {1, 1, 4, 4}).output("y", {1, 1, 4, 4});
    m.initializer("w", {1, 1, 1, 1}, {2.0f});
    m.initializer("s", {1}, {3.0f});
    m.node("Conv", {"x", "w"}, {"c"}, "conv");
    m.node("Identity", {"c"}, {"i"}, "identity");
    m.node("Mul", {"i", "s"}, {"y"}, "scale");
    const std::string bytes = m.bytes();

    auto create = [&](const std::string& path, int level, tessera::test::SessionPtr& session) {
        TessSessionOptions* raw = nullptr;
        EXPECT_EQ(tess_session_options_create(&raw), nullptr);
        tessera::test::OptionsPtr options(raw);
        EXPECT_EQ(tess_session_options_set_optimization_level(options.get(), level), nullptr);
        EXPECT_EQ(tess_session_options_set_optimized_model_path(options.get(), path.c_str()), nullptr);
        TessSession* s = nullptr;
        TessStatus* status = tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr,
                                                            options.get(), &s);
        session.reset(s);
        return tessera::test::StatusPtr(status);
    };

    tessera::test::SessionPtr session;
    const fs::path optimized = dir.path / "optimized.onnx";
    auto status = create(optimized.string(), TESS_OPTIMIZATION_ALL, session);
    ASSERT_EQ(status, nullptr) << tess_status_message(status.get());
    onnx::ModelProto proto = parse(optimized);
    std::vector<std::string> ops;
    for (const auto& node : proto.graph().node()) ops.push_back(node.op_type());
    EXPECT_EQ(ops, std::vector<std::string>{"Conv"});  // Identity removed, Mul folded into the Conv's weights

    const fs::path original = dir.path / "original.onnx";
    status = create(original.string(), TESS_OPTIMIZATION_DISABLED, session);
    ASSERT_EQ(status, nullptr) << tess_status_message(status.get());
    proto = parse(original);
    EXPECT_EQ(proto.graph().node_size(), 3);

    status = create("", TESS_OPTIMIZATION_ALL, session);  // off
    ASSERT_EQ(status, nullptr) << tess_status_message(status.get());

    const std::string bad = (dir.path / "no-such-dir" / "m.onnx").string();
    status = create(bad, TESS_OPTIMIZATION_ALL, session);
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(tess_status_code(status.get()), TESS_STATUS_RUNTIME_ERROR);
    EXPECT_NE(std::string(tess_status_message(status.get())).find(bad), std::string::npos)
        << tess_status_message(status.get());
    EXPECT_EQ(session, nullptr);

    tessera::test::StatusPtr null_options(tess_session_options_set_optimized_model_path(nullptr, "x.onnx"));
    EXPECT_EQ(tess_status_code(null_options.get()), TESS_STATUS_INVALID_ARGUMENT);
}
