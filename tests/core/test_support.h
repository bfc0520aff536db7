// Helpers shared by the core tests: building small ONNX models in memory, and RAII around the C API.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <stdlib.h>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "tessera/tessera.h"

namespace tessera::test {

// Directories produced by the build (compile definitions from tests/CMakeLists.txt).
inline std::filesystem::path plugin_dir() { return TESSERA_TEST_PLUGIN_DIR; }        // the real plugins (cpu)
inline std::filesystem::path test_plugin_dir() { return TESSERA_TEST_EXTRA_PLUGIN_DIR; }  // test-only plugins
#ifdef TESSERA_TEST_PLUGIN_SCANNER  // core_tests
// Plugins that crash, abort, exit or hang (plugins/misbehaving.c); only the isolation tests search them.
inline std::filesystem::path misbehaving_plugin_dir() { return TESSERA_TEST_MISBEHAVING_PLUGIN_DIR; }
inline std::filesystem::path test_cache_dir() { return TESSERA_TEST_CACHE_DIR; }

// The core is linked into the test program, so the plugin scanner is not next to it: name the one the build made.
// Probe verdicts go to a cache in the build tree, never to the user's.
inline const bool kProbeEnvironmentSet = [] {
    ::setenv("TESSERA_PLUGIN_SCANNER", TESSERA_TEST_PLUGIN_SCANNER, 1);
    ::setenv("XDG_CACHE_HOME", TESSERA_TEST_CACHE_DIR, 1);
    return true;
}();
#endif

struct ModelBuilder {
    onnx::ModelProto model;
    onnx::GraphProto* graph;

    explicit ModelBuilder(int64_t opset = 13, int64_t ir_version = 8) {
        model.set_ir_version(ir_version);
        auto* op = model.add_opset_import();
        op->set_domain("");
        op->set_version(opset);
        graph = model.mutable_graph();
        graph->set_name("test");
    }

    static void set_type(onnx::ValueInfoProto* info, const std::string& name, int32_t type,
                         std::vector<int64_t> dims) {
        info->set_name(name);
        auto* t = info->mutable_type()->mutable_tensor_type();
        t->set_elem_type(type);
        auto* shape = t->mutable_shape();
        for (int64_t d : dims) {
            if (d < 0) shape->add_dim()->set_dim_param("N");
            else shape->add_dim()->set_dim_value(d);
        }
    }
    ModelBuilder& input(const std::string& name, std::vector<int64_t> dims, int32_t type = onnx::TensorProto::FLOAT) {
        set_type(graph->add_input(), name, type, std::move(dims));
        return *this;
    }
    ModelBuilder& output(const std::string& name, std::vector<int64_t> dims, int32_t type = onnx::TensorProto::FLOAT) {
        set_type(graph->add_output(), name, type, std::move(dims));
        return *this;
    }
    onnx::NodeProto& node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                          const std::string& name = "") {
        auto* n = graph->add_node();
        n->set_op_type(op);
        n->set_name(name.empty() ? op + std::to_string(graph->node_size()) : name);
        for (auto& i : inputs) n->add_input(i);
        for (auto& o : outputs) n->add_output(o);
        return *n;
    }
    onnx::TensorProto& initializer(const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
        auto* t = graph->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) t->add_dims(d);
        for (float v : values) t->add_float_data(v);
        return *t;
    }
    std::string bytes() const { return model.SerializeAsString(); }
};

// Owners for C API handles.
struct StatusDeleter { void operator()(TessStatus* s) const { tess_status_release(s); } };
struct EnvDeleter { void operator()(TessEnv* e) const { tess_env_release(e); } };
struct SessionDeleter { void operator()(TessSession* s) const { tess_session_release(s); } };
struct ValueDeleter { void operator()(TessValue* v) const { tess_value_release(v); } };
struct OptionsDeleter { void operator()(TessSessionOptions* o) const { tess_session_options_release(o); } };
using StatusPtr = std::unique_ptr<TessStatus, StatusDeleter>;
using EnvPtr = std::unique_ptr<TessEnv, EnvDeleter>;
using SessionPtr = std::unique_ptr<TessSession, SessionDeleter>;
using ValuePtr = std::unique_ptr<TessValue, ValueDeleter>;
using OptionsPtr = std::unique_ptr<TessSessionOptions, OptionsDeleter>;

// Fails the test with the status message when not NULL.
#define TESS_ASSERT_OK(expr)                                                   \
    do {                                                                       \
        ::tessera::test::StatusPtr _s(expr);                                   \
        ASSERT_EQ(_s, nullptr) << tess_status_message(_s.get());               \
    } while (0)

// An environment that loads only the given directories (colon-separated).
inline EnvPtr make_env(const std::string& plugin_path) {
    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.log_level = TESS_LOG_ERROR;
    options.plugin_path = plugin_path.c_str();
    options.no_default_plugin_dirs = 1;
    TessEnv* env = nullptr;
    StatusPtr status(tess_env_create(&options, &env));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    return EnvPtr(env);
}

inline ValuePtr make_float_tensor(std::vector<int64_t> dims, const std::vector<float>& values) {
    TessValue* v = nullptr;
    StatusPtr status(tess_value_create_tensor(TESS_ELEMENT_FLOAT32, dims.data(), dims.size(), &v));
    EXPECT_EQ(status, nullptr);
    std::copy(values.begin(), values.end(), static_cast<float*>(tess_tensor_data(v)));
    return ValuePtr(v);
}

inline std::vector<float> floats_of(const TessValue* v) {
    const float* p = static_cast<const float*>(tess_tensor_const_data(v));
    return std::vector<float>(p, p + tess_tensor_element_count(v));
}

}  // namespace tessera::test
