// The ONNX light/ models with providers {cuda, cpu} (what CUDA claims runs there, the rest on the CPU) against their
// expected outputs.  Skipped, with the plugin's reason, where no GPU is usable.
#include <cstdlib>
#include <filesystem>

#include "cuda_test_support.h"
#include "onnx_io.h"

namespace tessera::cuda_test {
namespace {

std::filesystem::path backend_data() {
    if (const char* env = std::getenv("TESSERA_BACKEND_DATA")) return env;
    return TESSERA_TEST_BACKEND_DATA;
}

class CudaLightModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLightModel, MatchesExpectedOutput) {
    REQUIRE_CUDA();
    const std::string name = GetParam();
    const std::filesystem::path dir = backend_data() / "light";
    const std::filesystem::path model_path = dir / ("light_" + name + ".onnx");
    const std::filesystem::path expected_path = dir / ("light_" + name + "_output_0.pb");
    if (!std::filesystem::exists(model_path) || !std::filesystem::exists(expected_path))
        GTEST_SKIP() << "no light model data at " << dir << " (set TESSERA_BACKEND_DATA)";

    const onnx::ModelProto proto = onnx_io::load_model(model_path.string());
    const std::vector<ValueInfo> inputs = onnx_io::graph_inputs(proto);
    const std::vector<ValueInfo> outputs = onnx_io::graph_outputs(proto);
    std::vector<std::string> names;
    std::vector<Value> feeds;
    for (const ValueInfo& info : inputs) {
        names.push_back(info.name);
        feeds.push_back(onnx_io::light_input(info));
    }
    SessionOptions options;
    options.providers({"cuda", "cpu"});
    Session session(shared_env(), model_path.string(), &options);
    size_t cuda_nodes = 0, cpu_nodes = 0;
    for (const PartitionInfo& p : session.partitions()) (p.provider == "cuda" ? cuda_nodes : cpu_nodes) += p.node_ops.size();
    EXPECT_GT(cuda_nodes, 0u) << "nothing of " << name << " ran on CUDA";
    std::printf("[ info     ] %s: %zu nodes on cuda, %zu on cpu, %zu partitions\n", name.c_str(), cuda_nodes, cpu_nodes,
                session.partitions().size());

    std::vector<Value> got = session.run(names, feeds);
    ASSERT_FALSE(got.empty());
    const Value expected = onnx_io::load_value(expected_path.string(), outputs[0]);
    onnx_io::Tolerance tolerance;
    tolerance.rtol = name == "densenet121" ? 2e-3 : 1e-3;
    tolerance.atol = 1e-6;
    const std::string diff = onnx_io::compare_values(got[0], expected, tolerance);
    EXPECT_TRUE(diff.empty()) << name << ": " << diff;
}

INSTANTIATE_TEST_SUITE_P(Light, CudaLightModel,
                         ::testing::Values("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                                           "shufflenet", "squeezenet", "vgg19", "zfnet512"));

}  // namespace
}  // namespace tessera::cuda_test
