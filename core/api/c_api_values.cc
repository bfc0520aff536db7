// The consumer API's value functions (also lent to plugins through TessHostApi).
#include <cstring>

#include "common/status.h"
#include "common/value.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

bool is_tensor(const TessValue* v) { return v != nullptr && v->kind == TESS_VALUE_TENSOR; }

std::vector<int64_t> dims_of(const int64_t* dims, size_t rank) {
    if (rank > 0 && dims == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "dims is NULL with rank {}", rank);
    return std::vector<int64_t>(dims, dims + rank);
}

}  // namespace

extern "C" {

TESS_EXPORT TessStatus* tess_value_create_tensor(int32_t element_type, const int64_t* dims, size_t rank,
                                                 TessValue** out) {
    return guarded([&] {
        if (out == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "out is NULL");
        *out = make_host_tensor(element_type, dims_of(dims, rank)).release();
    });
}

TESS_EXPORT TessStatus* tess_value_create_tensor_over(int32_t element_type, const int64_t* dims, size_t rank,
                                                      void* data, size_t byte_size,
                                                      void (*deleter)(void*, void*), void* deleter_data,
                                                      TessValue** out) {
    return guarded([&] {
        if (out == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "out is NULL");
        if (!is_valid_element_type(element_type) || element_type == TESS_ELEMENT_STRING)
            fail(TESS_STATUS_INVALID_ARGUMENT, "element type {} cannot wrap caller memory", element_type);
        auto shape = dims_of(dims, rank);
        size_t needed = storage_bytes(element_type, checked_element_count(shape.data(), shape.size()));
        if (byte_size < needed)
            fail(TESS_STATUS_INVALID_ARGUMENT, "buffer of {} bytes is smaller than the {} bytes the shape needs",
                 byte_size, needed);
        if (data == nullptr && needed > 0) fail(TESS_STATUS_INVALID_ARGUMENT, "data is NULL");
        ValuePtr v = make_borrowed_tensor(element_type, std::move(shape), data, needed);
        v->deleter = deleter;
        v->deleter_data = deleter_data;
        *out = v.release();
    });
}

TESS_EXPORT TessStatus* tess_value_create_sequence(int32_t element_type, TessValue* const* items, size_t count,
                                                   TessValue** out) {
    // Ownership of the items passes to the sequence even when this fails, so callers never leak or double free.
    std::vector<ValuePtr> owned;
    for (size_t i = 0; items != nullptr && i < count; ++i) owned.emplace_back(items[i]);
    return guarded([&] {
        if (out == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "out is NULL");
        if (count > 0 && items == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "items is NULL");
        for (const auto& item : owned) {
            if (!item) fail(TESS_STATUS_INVALID_ARGUMENT, "a sequence item is NULL");
            if (item->kind != owned[0]->kind)
                fail(TESS_STATUS_INVALID_ARGUMENT, "sequence items must all be of one kind");
        }
        *out = make_sequence(element_type, std::move(owned)).release();
    });
}

TESS_EXPORT TessStatus* tess_value_create_optional(int32_t element_type, TessValue* inner, TessValue** out) {
    ValuePtr owned(inner);
    return guarded([&] {
        if (out == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "out is NULL");
        *out = make_optional(element_type, std::move(owned)).release();
    });
}

TESS_EXPORT void tess_value_release(TessValue* value) {
    try {
        delete value;
    } catch (...) {
    }
}

TESS_EXPORT int32_t tess_value_kind(const TessValue* v) { return v ? v->kind : TESS_VALUE_UNKNOWN; }
TESS_EXPORT int32_t tess_value_element_type(const TessValue* v) { return v ? v->element_type : TESS_ELEMENT_UNDEFINED; }
TESS_EXPORT size_t tess_tensor_rank(const TessValue* v) { return is_tensor(v) ? v->dims.size() : 0; }
TESS_EXPORT const int64_t* tess_tensor_dims(const TessValue* v) { return is_tensor(v) ? v->dims.data() : nullptr; }
TESS_EXPORT size_t tess_tensor_element_count(const TessValue* v) { return is_tensor(v) ? v->element_count() : 0; }
TESS_EXPORT size_t tess_tensor_byte_size(const TessValue* v) { return is_tensor(v) ? v->byte_size : 0; }
TESS_EXPORT void* tess_tensor_data(TessValue* v) { return is_tensor(v) ? v->data : nullptr; }
TESS_EXPORT const void* tess_tensor_const_data(const TessValue* v) { return is_tensor(v) ? v->data : nullptr; }

TESS_EXPORT TessStatus* tess_tensor_get_string(const TessValue* v, size_t index, const char** data, size_t* len) {
    return guarded([&] {
        if (!is_tensor(v) || v->element_type != TESS_ELEMENT_STRING)
            fail(TESS_STATUS_INVALID_ARGUMENT, "not a string tensor");
        if (index >= v->strings.size())
            fail(TESS_STATUS_INVALID_ARGUMENT, "string index {} out of range ({})", index, v->strings.size());
        if (data == nullptr || len == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "NULL output");
        *data = v->strings[index].data();
        *len = v->strings[index].size();
    });
}

TESS_EXPORT TessStatus* tess_tensor_set_string(TessValue* v, size_t index, const char* data, size_t len) {
    return guarded([&] {
        if (!is_tensor(v) || v->element_type != TESS_ELEMENT_STRING)
            fail(TESS_STATUS_INVALID_ARGUMENT, "not a string tensor");
        if (index >= v->strings.size())
            fail(TESS_STATUS_INVALID_ARGUMENT, "string index {} out of range ({})", index, v->strings.size());
        if (data == nullptr && len > 0) fail(TESS_STATUS_INVALID_ARGUMENT, "data is NULL");
        v->strings[index].assign(data == nullptr ? "" : data, len);
    });
}

TESS_EXPORT size_t tess_sequence_length(const TessValue* v) {
    return v != nullptr && v->kind == TESS_VALUE_SEQUENCE ? v->items.size() : 0;
}
TESS_EXPORT const TessValue* tess_sequence_at(const TessValue* v, size_t index) {
    return v != nullptr && v->kind == TESS_VALUE_SEQUENCE && index < v->items.size() ? v->items[index] : nullptr;
}
TESS_EXPORT int32_t tess_optional_has_value(const TessValue* v) {
    return v != nullptr && v->kind == TESS_VALUE_OPTIONAL && v->has_value ? 1 : 0;
}
TESS_EXPORT const TessValue* tess_optional_value(const TessValue* v) {
    return tess_optional_has_value(v) ? v->items[0] : nullptr;
}

TESS_EXPORT size_t tess_element_size(int32_t element_type) { return element_size(element_type); }
TESS_EXPORT size_t tess_element_storage_bytes(int32_t element_type, size_t count) {
    return element_type == TESS_ELEMENT_STRING ? 0 : storage_bytes(element_type, count);
}
TESS_EXPORT const char* tess_element_type_name(int32_t element_type) { return element_type_name(element_type); }

}  // extern "C"
