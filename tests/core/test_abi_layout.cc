// Pins the layout of every struct that crosses the C ABI (x86-64 / LP64).  A failing assert here means an ABI
// break: new fields go at the end of a struct and bump nothing else; anything else needs a new ABI version.
#include <cstddef>

#include <gtest/gtest.h>

#include "tessera/custom_op.h"
#include "tessera/provider.h"
#include "tessera/tessera.h"

static_assert(sizeof(void*) == 8, "the layout pins below are for 64-bit targets");

static_assert(offsetof(TessMemoryKind, struct_size) == 0);
static_assert(offsetof(TessMemoryKind, name) == 8);
static_assert(offsetof(TessMemoryKind, host_accessible) == 16);
static_assert(offsetof(TessMemoryKind, device_id) == 20);
static_assert(sizeof(TessMemoryKind) == 24);

static_assert(offsetof(TessEnvOptions, log_level) == 8);
static_assert(offsetof(TessEnvOptions, log_callback) == 16);
static_assert(offsetof(TessEnvOptions, plugin_path) == 32);
static_assert(offsetof(TessEnvOptions, no_default_plugin_dirs) == 40);
static_assert(offsetof(TessEnvOptions, plugin_probe_timeout_ms) == 48);  // past the old struct (48 bytes)
static_assert(offsetof(TessEnvOptions, plugin_probe) == 56);
static_assert(sizeof(TessEnvOptions) == 64);

static_assert(offsetof(TessPluginInfo, path) == 8);
static_assert(offsetof(TessPluginInfo, state) == 32);
static_assert(offsetof(TessPluginInfo, reason) == 40);
static_assert(offsetof(TessPluginInfo, abi_version) == 48);
static_assert(offsetof(TessPluginInfo, providers) == 64);
static_assert(offsetof(TessPluginInfo, custom_ops) == 80);
static_assert(sizeof(TessPluginInfo) == 88);

static_assert(offsetof(TessValueInfo, name) == 8);
static_assert(offsetof(TessValueInfo, kind) == 16);
static_assert(offsetof(TessValueInfo, rank) == 24);
static_assert(offsetof(TessValueInfo, dim_params) == 40);
static_assert(sizeof(TessValueInfo) == 48);

static_assert(offsetof(TessPartitionInfo, provider) == 8);
static_assert(offsetof(TessPartitionInfo, node_count) == 16);
static_assert(offsetof(TessPartitionInfo, copy_count) == 72);
static_assert(offsetof(TessPartitionInfo, input_copied) == 88);
static_assert(sizeof(TessPartitionInfo) == 96);

static_assert(offsetof(TessModelMetadata, producer_name) == 8);
static_assert(offsetof(TessModelMetadata, model_version) == 56);
static_assert(offsetof(TessModelMetadata, custom_count) == 64);
static_assert(offsetof(TessModelMetadata, custom_values) == 80);
static_assert(sizeof(TessModelMetadata) == 88);

static_assert(offsetof(TessValueView, name) == 8);
static_assert(offsetof(TessValueView, kind) == 16);
static_assert(offsetof(TessValueView, rank) == 24);
static_assert(offsetof(TessValueView, constant) == 40);
static_assert(sizeof(TessValueView) == 48);

static_assert(offsetof(TessAttributeView, type) == 16);
static_assert(offsetof(TessAttributeView, f) == 20);
static_assert(offsetof(TessAttributeView, i) == 24);
static_assert(offsetof(TessAttributeView, graphs) == 112);
static_assert(sizeof(TessAttributeView) == 120);

static_assert(offsetof(TessNodeView, index) == 8);
static_assert(offsetof(TessNodeView, opset) == 40);
static_assert(offsetof(TessNodeView, attributes) == 88);
static_assert(offsetof(TessNodeView, implicit_inputs) == 104);
static_assert(sizeof(TessNodeView) == 112);

static_assert(offsetof(TessGraphView, nodes) == 24);
static_assert(offsetof(TessGraphView, opset_versions) == 80);
static_assert(sizeof(TessGraphView) == 88);

static_assert(offsetof(TessHostApi, abi_version_min) == 8);
static_assert(offsetof(TessHostApi, status_create) == 16);
static_assert(offsetof(TessHostApi, log) == 48);
static_assert(offsetof(TessHostApi, value_release) == 192);
static_assert(offsetof(TessHostApi, capability_claim) == 200);
static_assert(offsetof(TessHostApi, compute_set_output) == 248);
static_assert(offsetof(TessHostApi, value_create_tensor_view) == 256);
static_assert(offsetof(TessHostApi, shape_set_output) == 264);
static_assert(offsetof(TessHostApi, compile_release_constant) == 272);
static_assert(offsetof(TessHostApi, compute_profiling) == 280);
static_assert(offsetof(TessHostApi, compute_profile_node) == 288);
static_assert(offsetof(TessHostApi, compute_should_stop) == 296);
static_assert(sizeof(TessHostApi) == 304);

static_assert(offsetof(TessProviderOptions, intra_op_threads) == 8);
static_assert(offsetof(TessProviderOptions, custom_ops) == 48);
static_assert(offsetof(TessProviderOptions, memory_limit_bytes) == 56);
static_assert(sizeof(TessProviderOptions) == 64);

static_assert(offsetof(TessProviderApi, name) == 8);
static_assert(offsetof(TessProviderApi, check_available) == 24);
static_assert(offsetof(TessProviderApi, compute) == 72);
static_assert(offsetof(TessProviderApi, copy_from_host) == 112);
static_assert(offsetof(TessProviderApi, is_fallback) == 120);
static_assert(sizeof(TessProviderApi) == 128);

static_assert(offsetof(TessPluginExports, abi_version) == 8);
static_assert(offsetof(TessPluginExports, providers) == 40);
static_assert(offsetof(TessPluginExports, shutdown) == 48);
static_assert(offsetof(TessPluginExports, custom_ops) == 64);
static_assert(sizeof(TessPluginExports) == 72);

static_assert(offsetof(TessCustomOpParam, types) == 16);
static_assert(offsetof(TessCustomOpParam, variadic) == 36);
static_assert(sizeof(TessCustomOpParam) == 40);
static_assert(offsetof(TessKernelContextApi, set_output) == 40);
static_assert(sizeof(TessKernelContextApi) == 48);
static_assert(offsetof(TessCustomOpApi, since_version) == 24);
static_assert(offsetof(TessCustomOpApi, op_data) == 88);
static_assert(offsetof(TessCustomOpApi, compute) == 128);
static_assert(sizeof(TessCustomOpApi) == 136);

// Enumerations keep ONNX's numbers.
static_assert(TESS_ELEMENT_FLOAT32 == 1 && TESS_ELEMENT_STRING == 8 && TESS_ELEMENT_BFLOAT16 == 16 &&
              TESS_ELEMENT_INT4 == 22 && TESS_ELEMENT_INT2 == 26 && TESS_ELEMENT_FLOAT6E2M3 == 27 &&
              TESS_ELEMENT_FLOAT6E3M2 == 28);
static_assert(TESS_ATTR_GRAPH == 5 && TESS_ATTR_TYPE_PROTOS == 14);

TEST(AbiLayout, PinnedAtCompileTime) { SUCCEED(); }
