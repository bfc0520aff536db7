#include "common/value.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/status.h"

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

struct TypeFacts {
    const char* name;
    size_t bytes;      // per element; 0 for strings / sub-byte
    size_t bits;       // per element
};

TypeFacts facts(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return {"float", 4, 32};
        case TESS_ELEMENT_UINT8: return {"uint8", 1, 8};
        case TESS_ELEMENT_INT8: return {"int8", 1, 8};
        case TESS_ELEMENT_UINT16: return {"uint16", 2, 16};
        case TESS_ELEMENT_INT16: return {"int16", 2, 16};
        case TESS_ELEMENT_INT32: return {"int32", 4, 32};
        case TESS_ELEMENT_INT64: return {"int64", 8, 64};
        case TESS_ELEMENT_STRING: return {"string", 0, 0};
        case TESS_ELEMENT_BOOL: return {"bool", 1, 8};
        case TESS_ELEMENT_FLOAT16: return {"float16", 2, 16};
        case TESS_ELEMENT_FLOAT64: return {"double", 8, 64};
        case TESS_ELEMENT_UINT32: return {"uint32", 4, 32};
        case TESS_ELEMENT_UINT64: return {"uint64", 8, 64};
        case TESS_ELEMENT_COMPLEX64: return {"complex64", 8, 64};
        case TESS_ELEMENT_COMPLEX128: return {"complex128", 16, 128};
        case TESS_ELEMENT_BFLOAT16: return {"bfloat16", 2, 16};
        case TESS_ELEMENT_FLOAT8E4M3FN: return {"float8e4m3fn", 1, 8};
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: return {"float8e4m3fnuz", 1, 8};
        case TESS_ELEMENT_FLOAT8E5M2: return {"float8e5m2", 1, 8};
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: return {"float8e5m2fnuz", 1, 8};
        case TESS_ELEMENT_UINT4: return {"uint4", 0, 4};
        case TESS_ELEMENT_INT4: return {"int4", 0, 4};
        case TESS_ELEMENT_FLOAT4E2M1: return {"float4e2m1", 0, 4};
        case TESS_ELEMENT_FLOAT8E8M0: return {"float8e8m0", 1, 8};
        case TESS_ELEMENT_UINT2: return {"uint2", 0, 2};
        case TESS_ELEMENT_INT2: return {"int2", 0, 2};
        case TESS_ELEMENT_FLOAT6E2M3: return {"float6e2m3", 0, 6};
        case TESS_ELEMENT_FLOAT6E3M2: return {"float6e3m2", 0, 6};
        default: return {nullptr, 0, 0};
    }
}

void free_aligned(void*, void* data) { std::free(data); }

}  // namespace

size_t element_size(int32_t type) { return facts(type).bytes; }

size_t element_bits(int32_t type) { return facts(type).bits; }

size_t storage_bytes(int32_t type, size_t count) {
    TypeFacts f = facts(type);
    if (f.bytes != 0) return f.bytes * count;
    return (count * f.bits + 7) / 8;
}

bool is_valid_element_type(int32_t type) { return facts(type).name != nullptr; }

const char* element_type_name(int32_t type) {
    const char* name = facts(type).name;
    return name != nullptr ? name : "undefined";
}

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
