// tessera-contrib-ops: the com.microsoft operators that onnxruntime's transformer optimizer (and its converters)
// write into models, with onnxruntime's semantics.  See README.md in this folder for the list, the types, and
// what each check declines.
#include <cblas.h>

#include <mutex>
#include <vector>

#include "op_support.h"

namespace tessera::contrib {
namespace {

const std::vector<const TessCustomOpApi*>& all_ops() {
    static const std::vector<const TessCustomOpApi*> ops = [] {
        std::vector<OpSpec> specs;
        add_activation_ops(specs);
        add_normalization_ops(specs);
        add_matmul_ops(specs);
        add_conv_ops(specs);
        std::vector<const TessCustomOpApi*> apis;
        for (OpSpec& spec : specs) apis.push_back(make_op(std::move(spec)));
        return apis;
    }();
    return ops;
}

}  // namespace
}  // namespace tessera::contrib

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    using namespace tessera::contrib;
    if (host->abi_version_min > 1 || host->abi_version_max < 1)
        return host->status_create(TESS_STATUS_ABI_MISMATCH, "the com.microsoft contrib ops speak plugin ABI 1");
    if (!TESS_HAS_FIELD(exports, TessPluginExports, custom_ops))
        return host->status_create(TESS_STATUS_ABI_MISMATCH, "this core does not take custom operators");
    try {
        // Global state is written by the first entry only: later entries (one per environment) may come while
        // other environments' sessions run these operators (provider.h).
        static std::once_flag initialized;
        std::call_once(initialized, [host] {
            g_host = host;
            // The library has no thread pool of its own: BLAS runs on the calling thread.  (The serial OpenBLAS
            // build, which the CMake prefers, ignores this; the pthread build would otherwise start its own threads.)
            openblas_set_num_threads(1);
        });
        const auto& ops = all_ops();
        exports->abi_version = 1;
        exports->name = "tessera-contrib-ops";
        exports->version = "1.0";
        exports->custom_op_count = ops.size();
        exports->custom_ops = ops.data();
        return nullptr;
    } catch (...) {
        return host->status_create(TESS_STATUS_INTERNAL, "the com.microsoft contrib ops failed to initialize");
    }
}
