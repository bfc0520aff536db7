// docs/plugins.md, "Checking a plugin from a program": run a model on the providers named on the command line and
// print which provider runs each partition.  Compiled and run by tests/docs (test_docs.sh).
//     consumer MODEL PROVIDER[,PROVIDER...] [PLUGIN_DIR]
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL PROVIDERS [PLUGIN_DIR]\n", argv[0]);
        return 2;
    }
    try {
        // [snippet:run]
        tessera::EnvOptions env_options;
        if (argc > 3) env_options.plugin_path = argv[3];  // where the plugin under test lives
        tessera::Env env(env_options);

        std::vector<std::string> providers;
        for (std::string list = argv[2]; !list.empty();) {
            const size_t comma = list.find(',');
            providers.push_back(list.substr(0, comma));
            list = comma == std::string::npos ? "" : list.substr(comma + 1);
        }
        tessera::SessionOptions options;
        options.providers(providers).strict(true);  // strict: fail rather than fall back to another provider
        tessera::Session session(env, argv[1], &options);

        for (const tessera::PartitionInfo& p : session.partitions())
            std::printf("partition: %s, %zu nodes, %zu input copies per run\n", p.provider.c_str(),
                        p.node_names.size(), p.copy_count);

        // One input per graph input: float tensors of ones (unknown dimensions taken as 1).
        std::vector<std::string> names;
        std::vector<tessera::Value> inputs;
        for (const tessera::ValueInfo& info : session.inputs()) {
            std::vector<int64_t> dims = info.dims;
            for (int64_t& d : dims) d = d < 0 ? 1 : d;
            tessera::Value x = tessera::Value::tensor(TESS_ELEMENT_FLOAT32, dims);
            for (size_t i = 0; i < x.element_count(); ++i) x.data<float>()[i] = 1.0f - static_cast<float>(i);
            names.push_back(info.name);
            inputs.push_back(std::move(x));
        }
        std::vector<tessera::Value> outputs = session.run(names, inputs);
        for (const tessera::Value& y : outputs)
            std::printf("output: %zu values, first %g\n", y.element_count(),
                        y.element_count() ? static_cast<double>(y.data<float>()[0]) : 0.0);
        // [end:run]
    } catch (const tessera::Error& e) {
        std::fprintf(stderr, "error: %s: %s\n", e.code_name(), e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
