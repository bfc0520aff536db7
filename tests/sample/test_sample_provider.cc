// The sample provider (plugins/sample) next to the CPU provider:
//  - every light/ model and a small transformer-style model give the same outputs with providers sample,cpu as with
//    cpu alone, and the plan really is split between the two;
//  - the copies the sample provider counts are exactly the boundary copies the partition plan announces (plus the
//    graph outputs that leave its memory, which the plan does not list: see expected_copies);
//  - after the sessions are released the provider holds no memory, no compiled partition and no instance.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "onnx_io.h"
#include "tessera/tessera.hpp"
#include "tessera_sample.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

// ---- The provider's counters --------------------------------------------------------------------------------------

TesseraSampleStats stats() {
    // dlopen of the file the environment loads returns the same library, so these are the provider's own counters.
    static void* handle = dlopen(TESSERA_SAMPLE_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    static auto fn = handle != nullptr
                         ? reinterpret_cast<TesseraSampleStatsFn>(dlsym(handle, TESSERA_SAMPLE_STATS_NAME))
                         : nullptr;
    if (fn == nullptr) throw std::runtime_error(std::string("cannot read the sample provider's counters: ") + dlerror());
    TesseraSampleStats s{};
    s.struct_size = sizeof(s);
    fn(&s);
    return s;
}

void expect_nothing_live(const std::string& context) {
    const TesseraSampleStats s = stats();
    EXPECT_EQ(s.live_allocations, 0u) << context;
    EXPECT_EQ(s.live_bytes, 0u) << context;
    EXPECT_EQ(s.live_compiled, 0u) << context;
    EXPECT_EQ(s.live_instances, 0u) << context;
}

Env make_env() {
    stats();  // load the plugin (and its counters) first
    EnvOptions options;
    options.plugin_path = TESSERA_SAMPLE_PLUGIN_DIR;  // opt-in directory; cpu comes from <libdir>/tessera/plugins
    return Env(options);
}

SessionOptions options_for(const std::vector<std::string>& providers, bool strict = false) {
    SessionOptions options;
    options.providers(providers).intra_op_threads(1);
    if (strict) options.strict(true);
    return options;
}

// ---- What the plan says the copies must be ------------------------------------------------------------------------
//
// The core copies a tensor whenever it crosses memory kinds.  TessPartitionInfo.copy_count counts, per partition, the
// inputs that arrive from another memory kind (session.cc): with only "sample" (its own memory) and "cpu" (host)
// in a session, the inputs of sample partitions are copied in with sample's copy_from_host and the inputs of cpu
// partitions that sample produced are copied out with its copy_to_host.  Graph outputs produced by a sample
// partition also leave through copy_to_host once per run; the plan does not count those (it counts inputs only).
struct CopyCounts {
    uint64_t from_host = 0;
    uint64_t to_host = 0;
};

CopyCounts expected_copies(const std::vector<PartitionInfo>& plan, const std::vector<std::string>& outputs) {
    CopyCounts c;
    for (const PartitionInfo& p : plan) {
        if (p.provider == "sample") c.from_host += p.copy_count;
        else c.to_host += p.copy_count;
    }
    for (const std::string& out : outputs)
        for (const PartitionInfo& p : plan)
            if (p.provider == "sample" && std::count(p.outputs.begin(), p.outputs.end(), out)) ++c.to_host;
    return c;
}

struct Feeds {
    std::vector<std::string> names;
    std::vector<Value> values;
};

struct Outcome {
    std::vector<Value> outputs;
    std::vector<PartitionInfo> plan;
};

// Runs once on a session made from `model` (a path or serialized bytes) and checks the copy invariant on the way.
template <typename MakeSession>
Outcome run_checked(MakeSession make_session, const Feeds& feeds, const std::string& context) {
    Outcome outcome;
    {
        Session session = make_session();
        outcome.plan = session.partitions();
        std::vector<std::string> output_names;
        for (const ValueInfo& info : session.outputs()) output_names.push_back(info.name);
        const TesseraSampleStats before = stats();
        outcome.outputs = session.run(feeds.names, feeds.values);
        const TesseraSampleStats after = stats();
        const CopyCounts expected = expected_copies(outcome.plan, output_names);
        size_t plan_copies = 0;
        for (const PartitionInfo& p : outcome.plan) plan_copies += p.copy_count;
        EXPECT_EQ(after.copies_from_host - before.copies_from_host, expected.from_host) << context;
        EXPECT_EQ(after.copies_to_host - before.copies_to_host, expected.to_host) << context;
        EXPECT_GE(after.copies_from_host + after.copies_to_host - before.copies_from_host - before.copies_to_host,
                  plan_copies)
            << context;
    }
    // Outputs are host values: with the session gone, the provider must hold nothing.
    expect_nothing_live(context);
    return outcome;
}

void expect_same_outputs(const std::vector<Value>& actual, const std::vector<Value>& expected,
                         const std::string& context, onnx_io::Tolerance tolerance = {1e-4, 1e-5}) {
    ASSERT_EQ(actual.size(), expected.size()) << context;
    for (size_t i = 0; i < actual.size(); ++i) {
        const std::string problem = onnx_io::compare_values(actual[i], expected[i], tolerance);
        EXPECT_EQ(problem, "") << context << " output " << i;
    }
}

size_t partitions_of(const std::vector<PartitionInfo>& plan, const std::string& provider) {
    return static_cast<size_t>(std::count_if(plan.begin(), plan.end(), [&](const PartitionInfo& p) {
        return p.provider == provider;
    }));
}

// ---- Light models --------------------------------------------------------------------------------------------------

std::vector<std::string> light_models() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(TESSERA_LIGHT_MODEL_DIR, ec))
        if (entry.path().extension() == ".onnx") names.push_back(entry.path().stem().string());
    std::sort(names.begin(), names.end());
    if (names.empty()) names.push_back("no_light_models_found");
    return names;
}

class LightModel : public ::testing::TestWithParam<std::string> {};

TEST_P(LightModel, SampleAndCpuMatchCpuAlone) {
    const fs::path path = fs::path(TESSERA_LIGHT_MODEL_DIR) / (GetParam() + ".onnx");
    if (!fs::exists(path)) GTEST_SKIP() << "no light models under " << TESSERA_LIGHT_MODEL_DIR;
    // The light rule: every graph input without initializer is float32, unknown dims count as 1, and holds
    // arange(n).reshape(shape) / n.
    Feeds feeds;
    for (const ValueInfo& info : onnx_io::graph_inputs(onnx_io::load_model(path.string()))) {
        feeds.names.push_back(info.name);
        feeds.values.push_back(onnx_io::light_input(info));
    }
    Env env = make_env();
    std::vector<Value> expected;
    {
        const SessionOptions cpu_options = options_for({"cpu"});
        Session cpu(env, path.string(), &cpu_options);
        expected = cpu.run(feeds.names, feeds.values);
    }
    const SessionOptions options = options_for({"sample", "cpu"});
    Outcome mixed = run_checked([&] { return Session(env, path.string(), &options); }, feeds, GetParam());
    EXPECT_GE(partitions_of(mixed.plan, "sample"), 1u) << GetParam();
    EXPECT_GE(partitions_of(mixed.plan, "cpu"), 1u) << GetParam();
    expect_same_outputs(mixed.outputs, expected, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Light, LightModel, ::testing::ValuesIn(light_models()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- Models built here ---------------------------------------------------------------------------------------------

// Deterministic pseudo-random floats in [-scale, scale).
class Random {
public:
    explicit Random(uint32_t seed) : state_(seed) {}
    float next(float scale = 1.0f) {
        state_ = state_ * 1664525u + 1013904223u;
        return (static_cast<float>(state_ >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f) * scale;
    }
    std::vector<float> floats(size_t n, float scale = 1.0f) {
        std::vector<float> v(n);
        for (float& x : v) x = next(scale);
        return v;
    }

private:
    uint32_t state_;
};

size_t count_of(const std::vector<int64_t>& dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
}

// A small ONNX graph written with the onnx protobuf classes.
class ModelBuilder {
public:
    explicit ModelBuilder(int64_t opset) {
        model_.set_ir_version(8);
        model_.set_producer_name("tessera-sample-tests");
        auto* import = model_.add_opset_import();
        import->set_domain("");
        import->set_version(opset);
        graph_ = model_.mutable_graph();
        graph_->set_name("sample_test");
    }

    // A float graph input, and its value for the run.
    std::string input(const std::string& name, const std::vector<int64_t>& dims, Random& random, float scale = 1.0f) {
        auto* in = graph_->add_input();
        in->set_name(name);
        set_type(in->mutable_type(), dims);
        Value v = Value::tensor(TESS_ELEMENT_FLOAT32, dims);
        const std::vector<float> data = random.floats(count_of(dims), scale);
        std::copy(data.begin(), data.end(), v.data<float>());
        feeds_.names.push_back(name);
        feeds_.values.push_back(std::move(v));
        return name;
    }
    std::string weight(const std::string& name, const std::vector<int64_t>& dims, Random& random, float scale = 0.5f) {
        return constant(name, dims, random.floats(count_of(dims), scale));
    }
    std::string constant(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& data) {
        auto* t = graph_->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) t->add_dims(d);
        for (float x : data) t->add_float_data(x);
        return name;
    }
    std::string int64_constant(const std::string& name, const std::vector<int64_t>& values) {
        auto* t = graph_->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::INT64);
        t->add_dims(static_cast<int64_t>(values.size()));
        for (int64_t x : values) t->add_int64_data(x);
        return name;
    }
    onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output) {
        auto* n = graph_->add_node();
        n->set_op_type(op);
        n->set_name(output + "_node");
        for (const auto& in : inputs) n->add_input(in);
        n->add_output(output);
        return n;
    }
    static void attribute(onnx::NodeProto* node, const std::string& name, float value) {
        auto* a = node->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(value);
    }
    static void attribute(onnx::NodeProto* node, const std::string& name, int64_t value) {
        auto* a = node->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(value);
    }
    static void attribute(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& values) {
        auto* a = node->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : values) a->add_ints(v);
    }
    void output(const std::string& name) {
        auto* out = graph_->add_output();
        out->set_name(name);
        out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    }

    std::string bytes() const { return model_.SerializeAsString(); }
    const Feeds& feeds() const { return feeds_; }

private:
    static void set_type(onnx::TypeProto* type, const std::vector<int64_t>& dims) {
        auto* tensor = type->mutable_tensor_type();
        tensor->set_elem_type(onnx::TensorProto::FLOAT);
        auto* shape = tensor->mutable_shape();
        for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    }

    onnx::ModelProto model_;
    onnx::GraphProto* graph_ = nullptr;
    Feeds feeds_;
};

// One transformer-style block: attention (MatMul + Add + Softmax), a residual, a LayerNorm written out of
// ReduceMean/Sub/Mul/Sqrt/Div, a Gemm feed-forward with every Gemm option, a 4-D broadcasting MatMul and the
// LayerNormalization operator.  Sample takes the arithmetic, cpu the rest, so the plan alternates.
ModelBuilder transformer_block() {
    Random random(7);
    ModelBuilder b(17);
    const int64_t batch = 2, seq = 8, dim = 16, hidden = 32;
    const std::string x = b.input("x", {batch, seq, dim}, random);
    auto linear = [&](const std::string& in, const std::string& name) {
        b.node("MatMul", {in, b.weight("W" + name, {dim, dim}, random)}, name + "_mm");
        b.node("Add", {name + "_mm", b.weight("b" + name, {dim}, random)}, name);
        return name;
    };
    const std::string q = linear(x, "q"), k = linear(x, "k"), v = linear(x, "v");
    ModelBuilder::attribute(b.node("Transpose", {k}, "kt"), "perm", std::vector<int64_t>{0, 2, 1});
    b.node("MatMul", {q, "kt"}, "scores");
    b.node("Div", {"scores", b.constant("scale", {}, {4.0f})}, "scaled");
    b.node("Add", {"scaled", b.weight("mask", {1, seq, seq}, random, 0.1f)}, "masked");
    ModelBuilder::attribute(b.node("Softmax", {"masked"}, "attn"), "axis", int64_t{-1});
    b.node("MatMul", {"attn", v}, "context");
    const std::string o = linear("context", "o");
    b.node("Add", {o, x}, "h");
    // LayerNorm, written out.
    ModelBuilder::attribute(b.node("ReduceMean", {"h"}, "mean"), "axes", std::vector<int64_t>{-1});
    b.node("Sub", {"h", "mean"}, "centered");
    b.node("Mul", {"centered", "centered"}, "squared");
    ModelBuilder::attribute(b.node("ReduceMean", {"squared"}, "variance"), "axes", std::vector<int64_t>{-1});
    b.node("Add", {"variance", b.constant("eps", {}, {1e-5f})}, "variance_eps");
    b.node("Sqrt", {"variance_eps"}, "stddev");
    b.node("Div", {"centered", "stddev"}, "normalized");
    b.node("Mul", {"normalized", b.weight("gamma", {dim}, random)}, "scaled_norm");
    b.node("Add", {"scaled_norm", b.weight("beta", {dim}, random)}, "n");
    // Feed-forward on rows: Gemm with transB and a bias, with alpha/beta and a column bias, with transA.
    b.node("Reshape", {"n", b.int64_constant("rows_shape", {batch * seq, dim})}, "rows");
    ModelBuilder::attribute(b.node("Gemm", {"rows", b.weight("W1", {hidden, dim}, random), b.weight("b1", {hidden}, random)},
                                   "ff1"),
                            "transB", int64_t{1});
    b.node("Tanh", {"ff1"}, "ff1_tanh");
    ModelBuilder::attribute(b.node("LeakyRelu", {"ff1_tanh"}, "ff1_act"), "alpha", 0.2f);
    auto* ff2 = b.node("Gemm", {"ff1_act", b.weight("W2", {hidden, dim}, random), b.weight("b2", {batch * seq, 1}, random)},
                       "ff2");
    ModelBuilder::attribute(ff2, "alpha", 0.5f);
    ModelBuilder::attribute(ff2, "beta", 2.0f);
    ModelBuilder::attribute(b.node("Gemm", {"ff2", b.weight("W3", {batch * seq, dim}, random)}, "ff3"), "transA",
                            int64_t{1});
    b.node("Sigmoid", {"ff3"}, "gate");  // [dim, dim]
    b.node("MatMul", {"rows", "gate"}, "gated");
    b.node("Reshape", {"gated", b.int64_constant("block_shape", {batch, seq, dim})}, "ff");
    b.node("Add", {"ff", "n"}, "residual");
    b.node("Clip", {"residual", "", b.constant("clip_max", {}, {1.5f})}, "clipped");
    b.node("Relu", {"clipped"}, "y");
    // A 4-D MatMul whose batch dimensions broadcast: [2,1,8,16] x [3,16,4] -> [2,3,8,4].
    b.node("Reshape", {"n", b.int64_constant("heads_shape", {batch, 1, seq, dim})}, "n4");
    b.node("MatMul", {"n4", b.weight("W4", {3, dim, 4}, random)}, "z");
    auto* ln = b.node("LayerNormalization", {"y", b.weight("ln_scale", {dim}, random), b.weight("ln_bias", {dim}, random)},
                      "y_norm");
    ModelBuilder::attribute(ln, "axis", int64_t{-1});
    b.output("y_norm");
    b.output("z");
    b.output("h");  // produced by sample: leaves its memory as a graph output
    return b;
}

// Every operator the sample provider claims, with the shapes that make broadcasting and MatMul interesting.
ModelBuilder every_sample_op() {
    Random random(11);
    ModelBuilder b(13);
    const std::string a = b.input("a", {2, 3, 4}, random, 3.0f);
    const std::string row = b.input("row", {4}, random);
    const std::string col = b.input("col", {3, 1}, random);
    b.node("Add", {a, row}, "add");
    b.node("Sub", {col, a}, "sub");
    b.node("Mul", {a, b.weight("mul_w", {2, 1, 4}, random)}, "mul");
    b.node("Div", {a, b.constant("two", {}, {2.0f})}, "div");
    b.node("Div", {b.constant("one", {1}, {1.0f}), b.input("den", {2, 1, 1}, random)}, "recip");
    b.node("Sum", {"add", "sub", "mul", row, "recip"}, "sum");
    b.node("Sum", {"div"}, "sum1");
    b.node("Relu", {"sum"}, "relu");
    b.node("Sigmoid", {b.input("big", {2, 5}, random, 100.0f)}, "sigmoid");
    b.node("Tanh", {"sum"}, "tanh");
    ModelBuilder::attribute(b.node("LeakyRelu", {"sum"}, "leaky"), "alpha", 0.1f);
    b.node("Clip", {"sum", b.constant("lo", {}, {-0.5f}), b.constant("hi", {}, {0.75f})}, "clip");
    b.node("Clip", {"sum"}, "clip_none");
    // MatMul: 1-D x 2-D, 3-D x 1-D, 1-D x 1-D, broadcast batch, 2-D x 3-D.
    b.node("MatMul", {row, b.weight("m45", {4, 5}, random)}, "mm_vec_mat");
    b.node("MatMul", {a, row}, "mm_ten_vec");
    b.node("MatMul", {row, row}, "mm_dot");
    b.node("MatMul", {b.input("p", {1, 3, 4}, random), b.weight("m245", {2, 4, 5}, random)}, "mm_batch");
    b.node("MatMul", {b.input("q", {3, 4}, random), b.weight("m2x45", {2, 4, 5}, random)}, "mm_2d_3d");
    // Gemm: scalar C, C of shape [M, 1], no C, both transposes.
    const std::string ga = b.input("ga", {3, 4}, random);
    b.node("Gemm", {ga, b.weight("gb", {4, 5}, random), b.constant("gc", {}, {0.25f})}, "gemm_scalar_c");
    auto* g2 = b.node("Gemm", {ga, b.weight("gbt", {5, 4}, random), b.weight("gc31", {3, 1}, random)}, "gemm_col_c");
    ModelBuilder::attribute(g2, "transB", int64_t{1});
    ModelBuilder::attribute(g2, "beta", -1.5f);
    auto* g3 = b.node("Gemm", {b.input("gat", {4, 3}, random), b.weight("gbt2", {5, 4}, random)}, "gemm_tt");
    ModelBuilder::attribute(g3, "transA", int64_t{1});
    ModelBuilder::attribute(g3, "transB", int64_t{1});
    ModelBuilder::attribute(g3, "alpha", 3.0f);
    for (const char* out : {"relu", "sigmoid", "tanh", "leaky", "clip", "clip_none", "sum1", "mm_vec_mat",
                            "mm_ten_vec", "mm_dot", "mm_batch", "mm_2d_3d", "gemm_scalar_c",
                            "gemm_col_c", "gemm_tt"})
        b.output(out);
    return b;
}

// Runs a built model with cpu alone and with `providers`, checking outputs and copies.
Outcome compare_with_cpu(const ModelBuilder& b, const std::vector<std::string>& providers, bool strict,
                         const std::string& context) {
    Env env = make_env();
    const std::string bytes = b.bytes();
    std::vector<Value> expected;
    {
        const SessionOptions cpu_options = options_for({"cpu"});
        Session cpu = Session::from_bytes(env, bytes.data(), bytes.size(), "", &cpu_options);
        expected = cpu.run(b.feeds().names, b.feeds().values);
    }
    const SessionOptions options = options_for(providers, strict);
    Outcome outcome = run_checked([&] { return Session::from_bytes(env, bytes.data(), bytes.size(), "", &options); },
                                  b.feeds(), context);
    expect_same_outputs(outcome.outputs, expected, context);
    return outcome;
}

TEST(SampleProvider, TransformerBlockMatchesCpu) {
    Outcome outcome = compare_with_cpu(transformer_block(), {"sample", "cpu"}, false, "transformer block");
    EXPECT_GE(partitions_of(outcome.plan, "sample"), 3u);
    EXPECT_GE(partitions_of(outcome.plan, "cpu"), 3u);
}

TEST(SampleProvider, RunsEveryClaimedOperatorAlone) {
    // Strict with sample alone: every node must be claimed, compiled and run by the sample provider.
    Outcome outcome = compare_with_cpu(every_sample_op(), {"sample"}, true, "every sample op");
    ASSERT_GE(outcome.plan.size(), 1u);
    for (const PartitionInfo& p : outcome.plan) EXPECT_EQ(p.provider, "sample");  // one per connected group
}

TEST(SampleProvider, ConcurrentRunsShareOneCompiledPlan) {
    const ModelBuilder b = transformer_block();
    const std::string bytes = b.bytes();
    Env env = make_env();
    {
        const SessionOptions options = options_for({"sample", "cpu"});
        Session session = Session::from_bytes(env, bytes.data(), bytes.size(), "", &options);
        const std::vector<Value> reference = session.run(b.feeds().names, b.feeds().values);
        std::vector<std::string> problems(4);
        std::vector<std::thread> threads;
        for (size_t t = 0; t < problems.size(); ++t)
            threads.emplace_back([&, t] {
                try {
                    for (int i = 0; i < 5; ++i) {
                        std::vector<Value> out = session.run(b.feeds().names, b.feeds().values);
                        for (size_t k = 0; k < out.size() && problems[t].empty(); ++k)
                            problems[t] = onnx_io::compare_values(out[k], reference[k], {0.0, 0.0});
                    }
                } catch (const std::exception& e) {
                    problems[t] = e.what();
                }
            });
        for (auto& thread : threads) thread.join();
        for (const std::string& p : problems) EXPECT_EQ(p, "");
    }
    expect_nothing_live("after concurrent runs");
}

TEST(SampleProvider, DeclinesWithAReason) {
    Random random(3);
    ModelBuilder b(13);
    b.node("Softmax", {b.input("x", {2, 3}, random)}, "y");
    b.output("y");
    const std::string bytes = b.bytes();
    Env env = make_env();
    const SessionOptions options = options_for({"sample"}, true);
    try {
        Session::from_bytes(env, bytes.data(), bytes.size(), "", &options);
        FAIL() << "a strict session with sample alone must refuse Softmax";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_NOT_IMPLEMENTED);
        EXPECT_NE(std::string(e.what()).find("sample: sample runs float32 Add"), std::string::npos) << e.what();
    }
    expect_nothing_live("after a refused session");
}

TEST(SampleProvider, CountsTheCopiesAndBytesOfOneNode) {
    // A single Relu on sample alone: one copy in, one copy out, and the bytes of one tensor each way.
    Random random(5);
    ModelBuilder b(13);
    b.node("Relu", {b.input("x", {4, 8}, random)}, "y");
    b.output("y");
    const std::string bytes = b.bytes();
    Env env = make_env();
    {
        const SessionOptions options = options_for({"sample"}, true);
        Session session = Session::from_bytes(env, bytes.data(), bytes.size(), "", &options);
        const TesseraSampleStats before = stats();
        std::vector<Value> out = session.run(b.feeds().names, b.feeds().values);
        const TesseraSampleStats after = stats();
        EXPECT_EQ(after.copies_from_host - before.copies_from_host, 1u);
        EXPECT_EQ(after.copies_to_host - before.copies_to_host, 1u);
        EXPECT_EQ(after.bytes_from_host - before.bytes_from_host, 4u * 8u * sizeof(float));
        EXPECT_EQ(after.bytes_to_host - before.bytes_to_host, 4u * 8u * sizeof(float));
        EXPECT_EQ(after.computes - before.computes, 1u);
        EXPECT_EQ(after.live_allocations, 0u) << "the run's input copy and output died with the run";
        EXPECT_EQ(after.live_instances, 1u);
        EXPECT_EQ(after.live_compiled, 1u);
    }
    expect_nothing_live("after the Relu session");
}

TessProviderStats core_stats(const Env& env, const char* provider) {
    TessProviderStats s{};
    s.struct_size = sizeof s;
    TessStatus* status = tess_env_provider_stats(env.get(), provider, &s);
    EXPECT_EQ(status, nullptr) << (status ? tess_status_message(status) : "");
    if (status != nullptr) tess_status_release(status);
    return s;
}

TEST(SampleProvider, TheCoresCountsAgreeWithTheProvidersOwn) {
    // tess_env_provider_stats counts what the core asks through the provider table: the same copies, instances and
    // compiled partitions the sample provider counts itself, and nothing live once the session is gone.
    Random random(6);
    ModelBuilder b(13);
    b.node("Relu", {b.input("x", {4, 8}, random)}, "h");
    b.node("Sigmoid", {"h"}, "y");
    b.output("y");
    const std::string bytes = b.bytes();
    Env env = make_env();
    const TessProviderStats start = core_stats(env, "sample");
    const TesseraSampleStats own_start = stats();
    {
        const SessionOptions options = options_for({"sample"}, true);
        Session session = Session::from_bytes(env, bytes.data(), bytes.size(), "", &options);
        std::vector<Value> out = session.run(b.feeds().names, b.feeds().values);
        const TessProviderStats during = core_stats(env, "sample");
        const TesseraSampleStats own = stats();
        EXPECT_EQ(during.live_instances, 1u);
        EXPECT_EQ(during.live_compiled, 1u);
        EXPECT_EQ(during.copies_from_host - start.copies_from_host, own.copies_from_host - own_start.copies_from_host);
        EXPECT_EQ(during.copies_to_host - start.copies_to_host, own.copies_to_host - own_start.copies_to_host);
        EXPECT_EQ(during.bytes_to_host - start.bytes_to_host, 4u * 8u * sizeof(float));
        EXPECT_GE(during.total_allocations - start.total_allocations, 2u);  // the input's copy and the output
        EXPECT_EQ(during.live_allocations, 0u) << "the run's buffers died with the run";
    }
    const TessProviderStats end = core_stats(env, "sample");
    EXPECT_EQ(end.live_instances, 0u);
    EXPECT_EQ(end.live_compiled, 0u);
    EXPECT_EQ(end.live_allocations, 0u);
    TessProviderStats none{};
    none.struct_size = sizeof none;
    TessStatus* missing = tess_env_provider_stats(env.get(), "no-such-provider", &none);
    ASSERT_NE(missing, nullptr);
    EXPECT_EQ(tess_status_code(missing), TESS_STATUS_NOT_FOUND);
    tess_status_release(missing);
}

TEST(SampleProvider, EmptyTensors) {
    // Zero-element tensors flow through (the core skips the transfer of zero bytes, so no copy is counted here).
    Random random(9);
    ModelBuilder b(13);
    b.node("MatMul", {b.input("e", {0, 4}, random), b.weight("w", {4, 2}, random)}, "mm");
    b.node("Add", {"mm", b.weight("bias", {2}, random)}, "y");
    b.output("y");
    const std::string bytes = b.bytes();
    Env env = make_env();
    {
        const SessionOptions options = options_for({"sample"}, true);
        Session session = Session::from_bytes(env, bytes.data(), bytes.size(), "", &options);
        std::vector<Value> out = session.run(b.feeds().names, b.feeds().values);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 2}));
    }
    expect_nothing_live("after the empty-tensor session");
}

}  // namespace

// The C++ wrapper's run() overloads: a braced list of values, a vector of owned values and run options all resolve
// (a braced list used to be ambiguous between the ValueView and Value vectors).
TEST(CppWrapper, RunOverloadsResolve) {
    Random random(5);
    ModelBuilder b(13);
    b.node("Relu", {b.input("x", {2, 3}, random)}, "y");
    b.output("y");
    const std::string bytes = b.bytes();
    Env env = make_env();
    Session session = Session::from_bytes(env, bytes.data(), bytes.size());
    Value x = Value::tensor(TESS_ELEMENT_FLOAT32, {2, 3});
    x.data<float>()[1] = 2.0f;
    x.data<float>()[2] = -2.0f;
    const std::vector<Value> braced = session.run({"x"}, {x});
    std::vector<Value> owned;
    owned.push_back(Value::tensor(TESS_ELEMENT_FLOAT32, {2, 3}));
    owned[0].data<float>()[1] = 2.0f;
    const std::vector<Value> from_vector = session.run({"x"}, owned);
    tessera::RunOptions options;
    const std::vector<Value> with_options = session.run_with(options, {{"x", x}});
    for (const auto* out : {&braced, &from_vector, &with_options}) {
        ASSERT_EQ(out->size(), 1u);
        EXPECT_EQ((*out)[0].data<float>()[1], 2.0f);
        EXPECT_EQ((*out)[0].data<float>()[2], 0.0f);
    }
}
