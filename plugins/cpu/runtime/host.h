// CPU provider: access to the core's host functions (set once by the plugin entry) and small type helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/kernel.h"

namespace tessera::cpu {

// The host table the core passed to tess_plugin_entry; valid while the plugin is loaded.
const TessHostApi& host();
void set_host(const TessHostApi* host);

// Bytes for `count` elements of `type` (packed sub-byte types included; 0 for strings).
size_t element_bytes(int32_t type, size_t count);
const char* element_type_name(int32_t type);

// A kernel view of a host TessValue tensor.
Tensor tensor_of(const TessValue* value);

// Throws KernelError("what: message") for a non-NULL status (and releases it).
void check_status(TessStatus* status, const std::string& what);
// A deep host copy of a tensor, sequence or optional, owned by the caller (release with host().value_release).
TessValue* clone_value(const TessValue* value);
// Copies the elements of `source` into `target` (same type and element count; strings included).
void copy_tensor(const Tensor& source, const Tensor& target);

}  // namespace tessera::cpu
