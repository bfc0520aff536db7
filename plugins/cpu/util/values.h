// CPU provider: helpers for TessValue objects reached through the host function table (string elements, tensors
// inside sequences and optionals, values a kernel builds for set_output_value).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/kernel.h"

namespace tessera::cpu::values {

// Turns a host status into a KernelError (releasing the status).
inline void check(const TessHostApi& host, TessStatus* status, std::string_view what) {
    if (status == nullptr) return;
    std::string message(what);
    message += ": ";
    message += host.status_message(status);
    host.status_release(status);
    throw KernelError(message);
}

inline std::string_view get_string(const TessHostApi& host, const TessValue* value, size_t index) {
    const char* data = nullptr;
    size_t length = 0;
    check(host, host.tensor_get_string(value, index, &data, &length), "reading a string element");
    return {data, length};
}

inline void set_string(const TessHostApi& host, TessValue* value, size_t index, std::string_view text) {
    check(host, host.tensor_set_string(value, index, text.data(), text.size()), "writing a string element");
}

// A value owned by the kernel until it is handed to the context (release()) or put in a sequence.
struct ValueReleaser {
    const TessHostApi* host;
    void operator()(TessValue* value) const {
        if (value) host->value_release(value);
    }
};
using OwnedValue = std::unique_ptr<TessValue, ValueReleaser>;

inline Shape tensor_shape(const TessHostApi& host, const TessValue* value) {
    const size_t rank = host.tensor_rank(value);
    const int64_t* dims = host.tensor_dims(value);
    return Shape(dims, dims + rank);
}

inline OwnedValue create_tensor(const TessHostApi& host, int32_t type, const Shape& shape) {
    TessValue* value = nullptr;
    check(host, host.value_create_tensor(type, shape.data(), shape.size(), &value), "creating a tensor");
    return OwnedValue(value, ValueReleaser{&host});
}

// A new tensor value holding a copy of a kernel tensor (for sequences built from tensor inputs).
inline OwnedValue copy_tensor(const TessHostApi& host, const Tensor& tensor) {
    OwnedValue copy = create_tensor(host, tensor.type, tensor.shape);
    if (tensor.type == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < tensor.size(); ++i)
            set_string(host, copy.get(), size_t(i), get_string(host, tensor.value, size_t(i)));
    } else if (const size_t bytes = host.tensor_byte_size(copy.get())) {
        std::memcpy(host.tensor_data(copy.get()), tensor.data, bytes);
    }
    return copy;
}

// Copies a tensor value into a kernel output tensor of the same type and shape.
inline void copy_into(const TessHostApi& host, const TessValue* source, Tensor& destination) {
    if (destination.type == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < destination.size(); ++i)
            set_string(host, destination.value, size_t(i), get_string(host, source, size_t(i)));
    } else if (const size_t bytes = host.tensor_byte_size(source)) {
        std::memcpy(destination.data, host.tensor_const_data(source), bytes);
    }
}

// Builds a sequence from owned items (ownership passes to the sequence).
inline OwnedValue create_sequence(const TessHostApi& host, int32_t element_type, std::vector<OwnedValue> items) {
    std::vector<TessValue*> raw;
    raw.reserve(items.size());
    for (auto& item : items) raw.push_back(item.get());
    TessValue* sequence = nullptr;
    check(host, host.value_create_sequence(element_type, raw.data(), raw.size(), &sequence), "creating a sequence");
    for (auto& item : items) (void)item.release();  // now owned by the sequence
    return OwnedValue(sequence, ValueReleaser{&host});
}

// A deep copy of a tensor, sequence or optional value.
inline OwnedValue clone(const TessHostApi& host, const TessValue* value) {
    switch (host.value_kind(value)) {
        case TESS_VALUE_TENSOR: {
            const int32_t type = host.value_element_type(value);
            OwnedValue copy = create_tensor(host, type, tensor_shape(host, value));
            if (type == TESS_ELEMENT_STRING) {
                const size_t count = host.tensor_element_count(value);
                for (size_t i = 0; i < count; ++i) set_string(host, copy.get(), i, get_string(host, value, i));
            } else if (const size_t bytes = host.tensor_byte_size(value)) {
                std::memcpy(host.tensor_data(copy.get()), host.tensor_const_data(value), bytes);
            }
            return copy;
        }
        case TESS_VALUE_SEQUENCE: {
            const size_t length = host.sequence_length(value);
            std::vector<OwnedValue> items;
            items.reserve(length);
            for (size_t i = 0; i < length; ++i) items.push_back(clone(host, host.sequence_at(value, i)));
            return create_sequence(host, host.value_element_type(value), std::move(items));
        }
        case TESS_VALUE_OPTIONAL: {
            OwnedValue inner;
            if (host.optional_has_value(value)) inner = clone(host, host.optional_value(value));
            TessValue* optional = nullptr;
            check(host, host.value_create_optional(host.value_element_type(value), inner.get(), &optional),
                  "creating an optional");
            (void)inner.release();
            return OwnedValue(optional, ValueReleaser{&host});
        }
        default: throw KernelError("cannot copy a value of kind " + std::to_string(host.value_kind(value)));
    }
}

}  // namespace tessera::cpu::values
