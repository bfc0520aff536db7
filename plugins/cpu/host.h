// CPU provider: access to the core's host functions (set once by the plugin entry) and small type helpers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel.h"

namespace tessera::cpu {

// The host table the core passed to tess_plugin_entry; valid while the plugin is loaded.
const TessHostApi& host();
void set_host(const TessHostApi* host);

// Bytes for `count` elements of `type` (packed sub-byte types included; 0 for strings).
size_t element_bytes(int32_t type, size_t count);
const char* element_type_name(int32_t type);

// A kernel view of a host TessValue tensor.
Tensor tensor_of(const TessValue* value);

}  // namespace tessera::cpu
