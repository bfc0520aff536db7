#include "runtime/host.h"

#include <cstring>
#include <vector>

#include "tessera/support/element_types.hpp"

namespace tessera::cpu {

namespace {
const TessHostApi* g_host = nullptr;
}

const TessHostApi& host() { return *g_host; }
void set_host(const TessHostApi* h) { g_host = h; }

size_t element_bytes(int32_t type, size_t count) { return support::element_storage_bytes(type, count); }

const char* element_type_name(int32_t type) { return support::element_type_name(type); }

Tensor tensor_of(const TessValue* value) {
    const TessHostApi& h = host();
    Tensor t;
    t.type = h.value_element_type(value);
    size_t rank = h.tensor_rank(value);
    const int64_t* dims = h.tensor_dims(value);
    t.shape.assign(dims, dims + rank);
    // Kernels never write through input views; const_cast keeps one Tensor type for inputs and outputs.
    t.data = const_cast<void*>(h.tensor_const_data(value));
    t.value = const_cast<TessValue*>(value);
    return t;
}

void check_status(TessStatus* status, const std::string& what) {
    if (status == nullptr) return;
    std::string message = what + ": " + host().status_message(status);
    host().status_release(status);
    throw KernelError(message);
}

TessValue* clone_value(const TessValue* source) {
    const TessHostApi& h = host();
    int32_t kind = h.value_kind(source);
    int32_t type = h.value_element_type(source);
    TessValue* copy = nullptr;
    if (kind == TESS_VALUE_TENSOR) {
        check_status(h.value_create_tensor(type, h.tensor_dims(source), h.tensor_rank(source), &copy), "copy");
        copy_tensor(tensor_of(source), tensor_of(copy));
    } else if (kind == TESS_VALUE_SEQUENCE) {
        std::vector<TessValue*> items;
        for (size_t i = 0; i < h.sequence_length(source); ++i) items.push_back(clone_value(h.sequence_at(source, i)));
        check_status(h.value_create_sequence(type, items.data(), items.size(), &copy), "copy");
    } else if (kind == TESS_VALUE_OPTIONAL) {
        TessValue* inner = h.optional_has_value(source) ? clone_value(h.optional_value(source)) : nullptr;
        check_status(h.value_create_optional(type, inner, &copy), "copy");
    } else {
        throw KernelError("cannot copy a value of this kind");
    }
    return copy;
}

void copy_tensor(const Tensor& source, const Tensor& target) {
    if (source.type == TESS_ELEMENT_STRING) {
        for (int64_t k = 0; k < source.size(); ++k) {
            const char* data = nullptr;
            size_t len = 0;
            check_status(host().tensor_get_string(source.value, static_cast<size_t>(k), &data, &len), "copy");
            check_status(host().tensor_set_string(target.value, static_cast<size_t>(k), data, len), "copy");
        }
    } else if (size_t bytes = source.byte_size(); bytes > 0) {
        std::memcpy(target.data, source.data, bytes);
    }
}

}  // namespace tessera::cpu
