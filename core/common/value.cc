#include "common/value.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/status.h"
#include "tessera/support/element_types.hpp"

TessValue::~TessValue() {
    if (deleter != nullptr && data != nullptr) deleter(deleter_data, data);
    for (TessValue* item : items) delete item;
}

size_t TessValue::element_count() const {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
}

bool TessValue::is_host() const {
    return memory == nullptr || std::strcmp(memory->name, TESS_HOST_MEMORY_NAME) == 0;
}

namespace tessera {

namespace {

void free_aligned(void*, void* data) { std::free(data); }

}  // namespace

// The element-type table is the one plugins use (the SDK's support layer), so names and sizes agree everywhere.
size_t element_size(int32_t type) { return support::element_type_info(type).bytes; }

size_t element_bits(int32_t type) { return support::element_type_info(type).bits; }

size_t storage_bytes(int32_t type, size_t count) { return support::element_storage_bytes(type, count); }

bool is_valid_element_type(int32_t type) {
    return type == TESS_ELEMENT_STRING || support::element_type_info(type).bits != 0;
}

const char* element_type_name(int32_t type) { return support::element_type_name(type); }

size_t checked_element_count(const int64_t* dims, size_t rank) {
    size_t n = 1;
    for (size_t i = 0; i < rank; ++i) {
        if (dims[i] < 0) fail(TESS_STATUS_INVALID_ARGUMENT, "dimension {} is negative ({})", i, dims[i]);
        auto d = static_cast<size_t>(dims[i]);
        if (d != 0 && n > std::numeric_limits<size_t>::max() / 64 / d)
            fail(TESS_STATUS_INVALID_ARGUMENT, "tensor with {} dimensions is too large", rank);
        n *= d;
    }
    return n;
}

ValuePtr make_host_tensor(int32_t type, std::vector<int64_t> dims) {
    if (!is_valid_element_type(type)) fail(TESS_STATUS_INVALID_ARGUMENT, "unknown element type {}", type);
    ValuePtr v(new TessValue);
    v->kind = TESS_VALUE_TENSOR;
    v->element_type = type;
    size_t count = checked_element_count(dims.data(), dims.size());
    v->dims = std::move(dims);
    if (type == TESS_ELEMENT_STRING) {
        v->strings.resize(count);
        return v;
    }
    size_t bytes = storage_bytes(type, count);
    size_t rounded = (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (data == nullptr) throw std::bad_alloc();
    std::memset(data, 0, rounded == 0 ? 64 : rounded);
    v->data = data;
    v->byte_size = bytes;
    v->deleter = free_aligned;
    return v;
}

ValuePtr make_borrowed_tensor(int32_t type, std::vector<int64_t> dims, void* data, size_t bytes) {
    ValuePtr v(new TessValue);
    v->kind = TESS_VALUE_TENSOR;
    v->element_type = type;
    v->dims = std::move(dims);
    v->data = data;
    v->byte_size = bytes;
    return v;
}

ValuePtr make_sequence(int32_t element_type, std::vector<ValuePtr> items) {
    ValuePtr v(new TessValue);
    v->kind = TESS_VALUE_SEQUENCE;
    v->element_type = element_type;
    v->items.reserve(items.size());
    for (ValuePtr& item : items) v->items.push_back(item.release());
    return v;
}

ValuePtr make_optional(int32_t element_type, ValuePtr inner) {
    ValuePtr v(new TessValue);
    v->kind = TESS_VALUE_OPTIONAL;
    v->element_type = element_type;
    v->has_value = inner != nullptr;
    if (inner) v->items.push_back(inner.release());
    return v;
}

ValuePtr clone_host(const TessValue& value) {
    if (value.kind == TESS_VALUE_TENSOR) {
        if (!value.is_host() && !(value.memory && value.memory->host_accessible))
            fail(TESS_STATUS_INTERNAL, "clone_host of a device tensor");
        ValuePtr copy = make_host_tensor(value.element_type, value.dims);
        if (value.element_type == TESS_ELEMENT_STRING)
            copy->strings = value.strings;
        else if (value.byte_size != 0)
            std::memcpy(copy->data, value.data, value.byte_size);
        return copy;
    }
    ValuePtr copy(new TessValue);
    copy->kind = value.kind;
    copy->element_type = value.element_type;
    copy->has_value = value.has_value;
    for (const TessValue* item : value.items) copy->items.push_back(clone_host(*item).release());
    return copy;
}

std::string describe_type(const TessValue& value) {
    switch (value.kind) {
        case TESS_VALUE_TENSOR:
            return fmt::format("tensor({})[{}]", element_type_name(value.element_type), fmt::join(value.dims, ","));
        case TESS_VALUE_SEQUENCE:
            return fmt::format("seq(tensor({}))", element_type_name(value.element_type));
        case TESS_VALUE_OPTIONAL:
            return fmt::format("optional({})", value.has_value ? describe_type(*value.items[0]) : "empty");
        default:
            return "unknown";
    }
}

}  // namespace tessera
