#include "model/tensor_proto_data.h"

#include <cstring>

#include "tessera/support/element_types.hpp"

namespace tessera::tensor_proto_data {

namespace {

std::string count_problem(const char* field, size_t entries, size_t expected) {
    return std::string(field) + " holds " + std::to_string(entries) + " entries, " + std::to_string(expected) +
           " expected";
}

// Stores each of `count` entries of a typed field as a Dst (a truncating cast for narrower integer types; the
// field's own width is copied as is).
template <typename Dst, typename Field>
std::string store(const Field& field, const char* name, size_t count, void* out) {
    if (static_cast<size_t>(field.size()) != count) return count_problem(name, field.size(), count);
    if (count == 0) return "";  // an empty field may have no storage at all: never read from its data()
    using Src = typename Field::value_type;
    if constexpr (sizeof(Src) == sizeof(Dst)) {
        std::memcpy(out, field.data(), count * sizeof(Dst));
    } else {
        auto* dst = static_cast<unsigned char*>(out);
        for (size_t i = 0; i < count; ++i) {
            const Dst v = static_cast<Dst>(field.Get(static_cast<int>(i)));
            std::memcpy(dst + i * sizeof(Dst), &v, sizeof(Dst));
        }
    }
    return "";
}

// Sub-byte types in int32_data: one packed storage byte per entry (what onnx writes for the 4- and 2-bit types), or
// one element code per entry (float6, whose elements do not fit a byte evenly); codes are packed low bits first,
// their higher bits ignored as onnx's reader ignores them.
std::string store_packed(const onnx::TensorProto& proto, unsigned bits, size_t count, size_t bytes, void* out) {
    const auto& field = proto.int32_data();
    const auto entries = static_cast<size_t>(field.size());
    auto* dst = static_cast<unsigned char*>(out);
    if (entries == bytes && 8 % bits == 0) {
        for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<unsigned char>(field.Get(static_cast<int>(i)));
        return "";
    }
    if (entries != count) return count_problem("int32_data", entries, count);
    const uint32_t mask = (1u << bits) - 1;
    std::memset(dst, 0, bytes);
    for (size_t i = 0; i < count; ++i) {
        const size_t bit = i * bits;
        const uint32_t code = (static_cast<uint32_t>(field.Get(static_cast<int>(i))) & mask) << (bit % 8);
        dst[bit / 8] = static_cast<unsigned char>(dst[bit / 8] | code);
        if (code > 0xff) dst[bit / 8 + 1] = static_cast<unsigned char>(dst[bit / 8 + 1] | (code >> 8));
    }
    return "";
}

// The typed field a tensor of `type` keeps its data in, and how many entries of it `count` elements take (the
// sub-byte types accept either count: see store_packed).
struct TypedField {
    const char* name;
    size_t entries;
    size_t entries_alternative;  // the same for the other sub-byte form; equal to `entries` otherwise
    int size;                    // the entries present
};

TypedField typed_field(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return {"float_data", count, count, proto.float_data_size()};
        case TESS_ELEMENT_COMPLEX64: return {"float_data", 2 * count, 2 * count, proto.float_data_size()};
        case TESS_ELEMENT_FLOAT64: return {"double_data", count, count, proto.double_data_size()};
        case TESS_ELEMENT_COMPLEX128: return {"double_data", 2 * count, 2 * count, proto.double_data_size()};
        case TESS_ELEMENT_INT64: return {"int64_data", count, count, proto.int64_data_size()};
        case TESS_ELEMENT_UINT64:
        case TESS_ELEMENT_UINT32: return {"uint64_data", count, count, proto.uint64_data_size()};
        default: break;
    }
    const support::ElementTypeInfo info = support::element_type_info(type);
    if (info.bytes == 0 && info.bits != 0 && 8 % info.bits == 0)
        return {"int32_data", bytes, count, proto.int32_data_size()};
    return {"int32_data", count, count, proto.int32_data_size()};
}

}  // namespace

std::string check(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes) {
    if (proto.has_raw_data()) {
        if (proto.raw_data().size() == bytes) return "";
        return "raw_data holds " + std::to_string(proto.raw_data().size()) + " bytes, " + std::to_string(bytes) +
               " expected";
    }
    const TypedField field = typed_field(proto, type, count, bytes);
    const auto entries = static_cast<size_t>(field.size);
    if (entries == field.entries || entries == field.entries_alternative) return "";
    return count_problem(field.name, entries, field.entries);
}

std::string copy(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes, void* out) {
    if (std::string problem = check(proto, type, count, bytes); !problem.empty()) return problem;
    if (proto.has_raw_data()) {
        if (bytes != 0) std::memcpy(out, proto.raw_data().data(), bytes);
        return "";
    }
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return store<float>(proto.float_data(), "float_data", count, out);
        case TESS_ELEMENT_COMPLEX64: return store<float>(proto.float_data(), "float_data", 2 * count, out);
        case TESS_ELEMENT_FLOAT64: return store<double>(proto.double_data(), "double_data", count, out);
        case TESS_ELEMENT_COMPLEX128: return store<double>(proto.double_data(), "double_data", 2 * count, out);
        case TESS_ELEMENT_INT64: return store<int64_t>(proto.int64_data(), "int64_data", count, out);
        case TESS_ELEMENT_UINT64: return store<uint64_t>(proto.uint64_data(), "uint64_data", count, out);
        case TESS_ELEMENT_UINT32: return store<uint32_t>(proto.uint64_data(), "uint64_data", count, out);
        case TESS_ELEMENT_INT32: return store<int32_t>(proto.int32_data(), "int32_data", count, out);
        case TESS_ELEMENT_BOOL: {
            std::string problem = store<uint8_t>(proto.int32_data(), "int32_data", count, out);
            auto* dst = static_cast<uint8_t*>(out);
            for (size_t i = 0; problem.empty() && i < count; ++i) dst[i] = dst[i] != 0 ? 1 : 0;
            return problem;
        }
        default: break;
    }
    const support::ElementTypeInfo info = support::element_type_info(type);
    if (info.bytes == 0 && info.bits != 0) return store_packed(proto, info.bits, count, bytes, out);
    // The remaining 8- and 16-bit types (integers, float16, bfloat16, float8) keep their bit patterns in int32_data.
    switch (info.bytes) {
        case 1: return store<uint8_t>(proto.int32_data(), "int32_data", count, out);
        case 2: return store<uint16_t>(proto.int32_data(), "int32_data", count, out);
        default: return std::string("element type ") + info.name + " has no typed field: it needs raw_data";
    }
}

}  // namespace tessera::tensor_proto_data
