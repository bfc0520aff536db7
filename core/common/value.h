// The core's runtime value (the C ABI's opaque TessValue): a tensor, a sequence or an optional.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common.h"

struct TessValue {
    using Deleter = void (*)(void* deleter_data, void* data);

    int32_t kind = TESS_VALUE_TENSOR;
    int32_t element_type = TESS_ELEMENT_UNDEFINED;

    // Tensor.
    std::vector<int64_t> dims;
    void* data = nullptr;
    size_t byte_size = 0;
    Deleter deleter = nullptr;  // releases `data`; NULL when the value does not own it
    void* deleter_data = nullptr;
    const TessMemoryKind* memory = nullptr;  // NULL: plain host memory
    std::vector<std::string> strings;        // string tensors

    // Sequence items / optional content (owned).
    std::vector<TessValue*> items;
    bool has_value = false;  // optionals

    TessValue() = default;
    TessValue(const TessValue&) = delete;
    TessValue& operator=(const TessValue&) = delete;
    ~TessValue();

    size_t element_count() const;
    bool is_host() const;
};

namespace tessera {

struct ValueDeleter {
    void operator()(TessValue* v) const { delete v; }
};
using ValuePtr = std::unique_ptr<TessValue, ValueDeleter>;
using SharedValue = std::shared_ptr<TessValue>;

size_t element_size(int32_t type);                     // 0 for strings and sub-byte types
size_t storage_bytes(int32_t type, size_t count);      // packed sub-byte types included; 0 for strings
size_t element_bits(int32_t type);                     // storage bits per element; 0 for strings
bool is_valid_element_type(int32_t type);
const char* element_type_name(int32_t type);
size_t checked_element_count(const int64_t* dims, size_t rank);  // throws on negative or overflowing dims

// A zero-filled, 64-byte aligned host tensor (strings: empty strings).
ValuePtr make_host_tensor(int32_t type, std::vector<int64_t> dims);
// A host tensor over memory the value does not own.
ValuePtr make_borrowed_tensor(int32_t type, std::vector<int64_t> dims, void* data, size_t bytes);
ValuePtr make_sequence(int32_t element_type, std::vector<ValuePtr> items);
ValuePtr make_optional(int32_t element_type, ValuePtr inner);

// Deep copy into host memory (the source must be host-accessible; device copies go through providers).
ValuePtr clone_host(const TessValue& value);

std::string describe_type(const TessValue& value);  // "tensor(float)[1,3,224,224]", "seq(tensor(int64))"

}  // namespace tessera
