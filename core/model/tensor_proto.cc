#include "model/tensor_proto.h"

#include <cstring>
#include <fstream>
#include <limits>

#include "common/status.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Resolves an external data location inside the model directory, refusing every way out of it.
fs::path resolve_external(const std::string& location, const ExternalDataPolicy& policy, const std::string& what) {
    if (!policy.model_dir)
        fail(TESS_STATUS_INVALID_MODEL, "{} uses external data, but the model was loaded without a base directory",
             what);
    fs::path rel(location);
    if (location.empty() || rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data location '{}' must be a relative path", what, location);
    for (const auto& part : rel)
        if (part == "..")
            fail(TESS_STATUS_INVALID_MODEL, "{}: external data location '{}' leaves the model directory", what,
                 location);
    std::error_code ec;
    fs::path dir = fs::canonical(*policy.model_dir, ec);
    if (ec) fail(TESS_STATUS_NOT_FOUND, "{}: model directory '{}' not found", what, policy.model_dir->string());
    fs::path file = fs::canonical(dir / rel, ec);
    if (ec) fail(TESS_STATUS_NOT_FOUND, "{}: external data file '{}' not found", what, location);
    // canonical() resolved every link: the real file must still be below the real model directory.
    auto [dir_end, file_it] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
    if (dir_end != dir.end())
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data location '{}' resolves outside the model directory", what,
             location);
    if (!fs::is_regular_file(file))
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data '{}' is not a regular file", what, location);
    return file;
}

void read_external(const onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what,
                   void* dst, size_t bytes) {
    std::string location;
    uint64_t offset = 0;
    std::optional<uint64_t> length;
    for (const auto& entry : proto.external_data()) {
        try {
            if (entry.key() == "location") location = entry.value();
            else if (entry.key() == "offset") offset = std::stoull(entry.value());
            else if (entry.key() == "length") length = std::stoull(entry.value());
        } catch (const std::exception&) {
            fail(TESS_STATUS_INVALID_MODEL, "{}: external data field '{}' is not a number", what, entry.key());
        }
    }
    fs::path file = resolve_external(location, policy, what);
    if (length && *length != bytes)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data length {} does not match the {} bytes its shape needs",
             what, *length, bytes);
    std::error_code ec;
    uint64_t file_size = fs::file_size(file, ec);
    if (ec || offset > file_size || file_size - offset < bytes)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data file '{}' is too short (offset {}, {} bytes needed)", what,
             location, offset, bytes);
    std::ifstream in(file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in) fail(TESS_STATUS_INVALID_MODEL, "{}: could not read external data from '{}'", what, location);
}

template <typename Field> void check_count(const Field& field, size_t expected, const std::string& what) {
    if (static_cast<size_t>(field.size()) != expected)
        fail(TESS_STATUS_INVALID_MODEL, "{} holds {} values but its shape needs {}", what, field.size(), expected);
}

// Stores each integer of a typed field into `dst` truncated to `width` bytes (little-endian hosts).
template <typename Field> void store_truncated(const Field& field, void* dst, size_t width) {
    auto* out = static_cast<unsigned char*>(dst);
    for (int i = 0; i < field.size(); ++i) {
        auto v = field.Get(i);
        std::memcpy(out + static_cast<size_t>(i) * width, &v, width);
    }
}

// Packs the low `bits` bits of each integer of a typed field into the zero-filled `dst` as one bit stream, low bits
// first (the layout raw_data uses).
template <typename Field> void pack_codes(const Field& field, size_t bits, void* dst) {
    auto* out = static_cast<unsigned char*>(dst);
    const uint32_t mask = (1u << bits) - 1;
    for (int i = 0; i < field.size(); ++i) {
        const size_t bit = static_cast<size_t>(i) * bits;
        const uint32_t code = (static_cast<uint32_t>(field.Get(i)) & mask) << (bit % 8);
        out[bit / 8] |= static_cast<unsigned char>(code);
        if (code > 0xff) out[bit / 8 + 1] |= static_cast<unsigned char>(code >> 8);  // straddles two bytes
    }
}

}  // namespace

ValuePtr tensor_from_proto(const onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what) {
    int32_t type = proto.data_type();
    if (!is_valid_element_type(type)) fail(TESS_STATUS_INVALID_MODEL, "{} has unknown data type {}", what, type);
    std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
    for (int64_t d : dims)
        if (d < 0) fail(TESS_STATUS_INVALID_MODEL, "{} has a negative dimension", what);
    if (proto.has_segment()) fail(TESS_STATUS_INVALID_MODEL, "{} is segmented, which is not supported", what);
    ValuePtr value = make_host_tensor(type, dims);
    size_t count = value->element_count();
    size_t bytes = value->byte_size;

    if (type == TESS_ELEMENT_STRING) {
        check_count(proto.string_data(), count, what);
        for (size_t i = 0; i < count; ++i) value->strings[i] = proto.string_data(static_cast<int>(i));
        return value;
    }
    if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
        read_external(proto, policy, what, value->data, bytes);
        return value;
    }
    if (proto.has_raw_data()) {
        if (proto.raw_data().size() != bytes)
            fail(TESS_STATUS_INVALID_MODEL, "{} has {} bytes of raw data but its shape needs {}", what,
                 proto.raw_data().size(), bytes);
        std::memcpy(value->data, proto.raw_data().data(), bytes);
        return value;
    }
    switch (type) {
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_COMPLEX64:
            check_count(proto.float_data(), bytes / 4, what);
            std::memcpy(value->data, proto.float_data().data(), bytes);
            break;
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_COMPLEX128:
            check_count(proto.double_data(), bytes / 8, what);
            std::memcpy(value->data, proto.double_data().data(), bytes);
            break;
        case TESS_ELEMENT_INT64:
            check_count(proto.int64_data(), count, what);
            std::memcpy(value->data, proto.int64_data().data(), bytes);
            break;
        case TESS_ELEMENT_UINT32:
        case TESS_ELEMENT_UINT64:
            check_count(proto.uint64_data(), count, what);
            store_truncated(proto.uint64_data(), value->data, element_size(type));
            break;
        case TESS_ELEMENT_INT32:
            check_count(proto.int32_data(), count, what);
            std::memcpy(value->data, proto.int32_data().data(), bytes);
            break;
        default:
            if (element_size(type) != 0) {
                // 8- and 16-bit types (bool, float16, bfloat16, float8) keep their bit patterns in int32_data.
                check_count(proto.int32_data(), count, what);
                store_truncated(proto.int32_data(), value->data, element_size(type));
            } else if (const size_t bits = element_bits(type); 8 % bits == 0) {
                // 4- and 2-bit types: one int32 per packed storage byte.
                check_count(proto.int32_data(), bytes, what);
                store_truncated(proto.int32_data(), value->data, 1);
            } else {
                // float6: one int32 per element holding its code; higher bits are ignored, as onnx's reader does.
                check_count(proto.int32_data(), count, what);
                pack_codes(proto.int32_data(), bits, value->data);
            }
    }
    return value;
}

ValuePtr take_tensor_from_proto(onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what) {
    const int32_t type = proto.data_type();
    const bool movable = proto.has_raw_data() && proto.data_location() != onnx::TensorProto::EXTERNAL &&
                         !proto.has_segment() && type != TESS_ELEMENT_STRING && is_valid_element_type(type);
    if (!movable) return tensor_from_proto(proto, policy, what);
    std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
    for (int64_t d : dims)
        if (d < 0) fail(TESS_STATUS_INVALID_MODEL, "{} has a negative dimension", what);
    const size_t bytes = storage_bytes(type, checked_element_count(dims.data(), dims.size()));
    if (proto.raw_data().size() != bytes)
        fail(TESS_STATUS_INVALID_MODEL, "{} has {} bytes of raw data but its shape needs {}", what,
             proto.raw_data().size(), bytes);
    if (bytes < 4096) return tensor_from_proto(proto, policy, what);  // small: an aligned copy costs nothing
    auto holder = std::make_unique<std::string>();
    holder->swap(*proto.mutable_raw_data());
    ValuePtr value = make_borrowed_tensor(type, std::move(dims), holder->data(), bytes);
    value->deleter = [](void* owner, void*) { delete static_cast<std::string*>(owner); };
    value->deleter_data = holder.release();
    return value;
}

}  // namespace tessera
