// tessera-contrib-ops: the com.microsoft operators that onnxruntime's transformer optimizer (and its converters)
// write into models, with onnxruntime's semantics.  See README.md in this folder for the list, the types, and
// what each check declines.
#include <cblas.h>

#include <mutex>
#include <vector>

#include "op_support.h"

namespace tessera::contrib {
namespace {

std::vector<const TessCustomOpApi*> build_ops() {
    std::vector<OpSpec> specs;
    add_activation_ops(specs);
    add_normalization_ops(specs);
    add_matmul_ops(specs);
    add_conv_ops(specs);
    std::vector<const TessCustomOpApi*> apis;
    for (OpSpec& spec : specs) apis.push_back(make_op(std::move(spec)));
    return apis;
}

}  // namespace
}  // namespace tessera::contrib

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    using namespace tessera::contrib;
    // Global state is written by the first entry only: later entries (one per environment) may come while other
    // environments' sessions run these operators (provider.h).  The operator table is built there too, and the
    // support layer reads the description after that.
    static std::once_flag initialized;
    static std::vector<const TessCustomOpApi*> ops;
    static tessera::support::PluginDescription plugin = [] {
        tessera::support::PluginDescription d;
        d.name = "tessera-contrib-ops";
        d.version = "1.0";
        return d;
    }();
    return tessera::support::enter_plugin(host, exports, plugin, initialized, [host] {
        g_host = host;
        // The library has no thread pool of its own: BLAS runs on the calling thread.  (The serial OpenBLAS build,
        // which the CMake prefers, ignores this; the pthread build would otherwise start its own threads.)
        openblas_set_num_threads(1);
        ops = build_ops();
        plugin.custom_ops = ops.data();
        plugin.custom_op_count = ops.size();
    });
}
