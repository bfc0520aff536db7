#include "runtime/host.h"

#include <cstring>
#include <vector>

#include "util/float_formats.h"

namespace tessera::cpu {

namespace {
const TessHostApi* g_host = nullptr;
}

const TessHostApi& host() { return *g_host; }
void set_host(const TessHostApi* h) { g_host = h; }

size_t element_bytes(int32_t type, size_t count) {
    if (const int bits = fp::packed_bits(type)) return (count * size_t(bits) + 7) / 8;
    switch (type) {
        case TESS_ELEMENT_STRING: return 0;
        case TESS_ELEMENT_UINT8:
        case TESS_ELEMENT_INT8:
        case TESS_ELEMENT_BOOL:
        case TESS_ELEMENT_FLOAT8E4M3FN:
        case TESS_ELEMENT_FLOAT8E4M3FNUZ:
        case TESS_ELEMENT_FLOAT8E5M2:
        case TESS_ELEMENT_FLOAT8E5M2FNUZ:
        case TESS_ELEMENT_FLOAT8E8M0: return count;
        case TESS_ELEMENT_UINT16:
        case TESS_ELEMENT_INT16:
        case TESS_ELEMENT_FLOAT16:
        case TESS_ELEMENT_BFLOAT16: return 2 * count;
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_INT32:
        case TESS_ELEMENT_UINT32: return 4 * count;
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_INT64:
        case TESS_ELEMENT_UINT64:
        case TESS_ELEMENT_COMPLEX64: return 8 * count;
        case TESS_ELEMENT_COMPLEX128: return 16 * count;
        default: return 0;
    }
}

const char* element_type_name(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return "float";
        case TESS_ELEMENT_UINT8: return "uint8";
        case TESS_ELEMENT_INT8: return "int8";
        case TESS_ELEMENT_UINT16: return "uint16";
        case TESS_ELEMENT_INT16: return "int16";
        case TESS_ELEMENT_INT32: return "int32";
        case TESS_ELEMENT_INT64: return "int64";
        case TESS_ELEMENT_STRING: return "string";
        case TESS_ELEMENT_BOOL: return "bool";
        case TESS_ELEMENT_FLOAT16: return "float16";
        case TESS_ELEMENT_FLOAT64: return "double";
        case TESS_ELEMENT_UINT32: return "uint32";
        case TESS_ELEMENT_UINT64: return "uint64";
        case TESS_ELEMENT_COMPLEX64: return "complex64";
        case TESS_ELEMENT_COMPLEX128: return "complex128";
        case TESS_ELEMENT_BFLOAT16: return "bfloat16";
        case TESS_ELEMENT_FLOAT8E4M3FN: return "float8e4m3fn";
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
        case TESS_ELEMENT_FLOAT8E5M2: return "float8e5m2";
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
        case TESS_ELEMENT_UINT4: return "uint4";
        case TESS_ELEMENT_INT4: return "int4";
        case TESS_ELEMENT_FLOAT4E2M1: return "float4e2m1";
        case TESS_ELEMENT_FLOAT8E8M0: return "float8e8m0";
        case TESS_ELEMENT_UINT2: return "uint2";
        case TESS_ELEMENT_INT2: return "int2";
        case TESS_ELEMENT_FLOAT6E2M3: return "float6e2m3";
        case TESS_ELEMENT_FLOAT6E3M2: return "float6e3m2";
        default: return "undefined";
    }
}

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
