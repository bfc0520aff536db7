#include "model/tensor_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "common/status.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Resolves an external data location inside the model directory, refusing every way out of it that a path can
// take (absolute paths, "..", symbolic links that leave it).  Hard links cannot be seen in a path: open_external
// checks the opened file.
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
    return file;
}

// A file descriptor closed when it goes out of scope.
struct FileDescriptor {
    int fd = -1;
    ~FileDescriptor() {
        if (fd >= 0) ::close(fd);
    }
};

// Opens the resolved file and checks what was opened, so nothing can be swapped in between: a regular file (not a
// FIFO or device, which could block or never end), the very file that was resolved, and one with a single link
// (a hard link inside the model directory may name a file outside it; CVE-2026-34446).  Returns its size.
uint64_t open_external(const fs::path& file, const std::string& location, const std::string& what,
                       FileDescriptor& out) {
    out.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (out.fd < 0)
        fail(TESS_STATUS_NOT_FOUND, "{}: cannot open external data '{}': {}", what, location, std::strerror(errno));
    struct stat opened {}, named {};
    if (::fstat(out.fd, &opened) != 0 || !S_ISREG(opened.st_mode))
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data '{}' is not a regular file", what, location);
    if (::stat(file.c_str(), &named) != 0 || named.st_dev != opened.st_dev || named.st_ino != opened.st_ino)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data '{}' changed while it was opened", what, location);
    if (opened.st_nlink > 1)
        fail(TESS_STATUS_INVALID_MODEL,
             "{}: external data '{}' has {} hard links; a hard link may lead outside the model directory, so only "
             "files with one link are read",
             what, location, opened.st_nlink);
    return static_cast<uint64_t>(opened.st_size);
}

// An external data offset or length: decimal digits only (no sign, no spaces), within 64 bits.
uint64_t parse_external_number(const std::string& text, const std::string& key, const std::string& what) {
    uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 20;
    for (char c : text) {
        if (!ok) break;
        ok = c >= '0' && c <= '9' && !__builtin_mul_overflow(value, 10u, &value) &&
             !__builtin_add_overflow(value, static_cast<uint64_t>(c - '0'), &value);
    }
    if (!ok)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data field '{}' is '{}', not a non-negative 64-bit number", what,
             key, text);
    return value;
}

// Checks the external data of a tensor of `bytes` bytes and opens it; the caller allocates only afterwards.
struct ExternalSource {
    FileDescriptor file;
    uint64_t offset = 0;
    std::string location;
};

void open_external_source(const onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what,
                          size_t bytes, ExternalSource& source) {
    std::optional<uint64_t> length;
    for (const auto& entry : proto.external_data()) {
        if (entry.key() == "location") source.location = entry.value();
        else if (entry.key() == "offset") source.offset = parse_external_number(entry.value(), "offset", what);
        else if (entry.key() == "length") length = parse_external_number(entry.value(), "length", what);
    }
    const fs::path file = resolve_external(source.location, policy, what);
    if (length && *length != bytes)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data length {} does not match the {} bytes its shape needs",
             what, *length, bytes);
    const uint64_t file_size = open_external(file, source.location, what, source.file);
    if (source.offset > file_size || file_size - source.offset < bytes)
        fail(TESS_STATUS_INVALID_MODEL, "{}: external data file '{}' is too short (offset {}, {} bytes needed)", what,
             source.location, source.offset, bytes);
}

void read_external(const ExternalSource& source, const std::string& what, void* dst, size_t bytes) {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < bytes) {
        const ssize_t n = ::pread(source.file.fd, out + done, bytes - done, static_cast<off_t>(source.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            fail(TESS_STATUS_INVALID_MODEL, "{}: could not read external data from '{}'", what, source.location);
        done += static_cast<size_t>(n);
    }
}

template <typename Field> void check_count(const Field& field, size_t expected, const std::string& what) {
    if (static_cast<size_t>(field.size()) != expected)
        fail(TESS_STATUS_INVALID_MODEL, "{} holds {} values but its shape needs {}", what, field.size(), expected);
}

// Checks that the typed field a tensor of `type` keeps its values in holds as many as its shape needs.
void check_typed_count(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes,
                       const std::string& what) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_COMPLEX64: return check_count(proto.float_data(), bytes / 4, what);
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_COMPLEX128: return check_count(proto.double_data(), bytes / 8, what);
        case TESS_ELEMENT_INT64: return check_count(proto.int64_data(), count, what);
        case TESS_ELEMENT_UINT32:
        case TESS_ELEMENT_UINT64: return check_count(proto.uint64_data(), count, what);
        case TESS_ELEMENT_INT32: return check_count(proto.int32_data(), count, what);
        default:
            // 4- and 2-bit types keep one int32 per packed storage byte; every other type one per element.
            if (element_size(type) == 0 && 8 % element_bits(type) == 0) return check_count(proto.int32_data(), bytes, what);
            return check_count(proto.int32_data(), count, what);
    }
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
    // Every size is checked against the data actually present before anything is allocated, so a tiny model that
    // declares a huge tensor costs an error, not its declared memory.
    const size_t count = checked_element_count(dims.data(), dims.size());
    const size_t bytes = storage_bytes(type, count);

    if (type == TESS_ELEMENT_STRING) {
        check_count(proto.string_data(), count, what);
        ValuePtr value = make_host_tensor(type, std::move(dims));
        for (size_t i = 0; i < count; ++i) value->strings[i] = proto.string_data(static_cast<int>(i));
        return value;
    }
    if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
        ExternalSource source;
        open_external_source(proto, policy, what, bytes, source);
        ValuePtr value = make_host_tensor(type, std::move(dims));
        read_external(source, what, value->data, bytes);
        return value;
    }
    if (proto.has_raw_data()) {
        if (proto.raw_data().size() != bytes)
            fail(TESS_STATUS_INVALID_MODEL, "{} has {} bytes of raw data but its shape needs {}", what,
                 proto.raw_data().size(), bytes);
        ValuePtr value = make_host_tensor(type, std::move(dims));
        std::memcpy(value->data, proto.raw_data().data(), bytes);
        return value;
    }
    check_typed_count(proto, type, count, bytes, what);
    ValuePtr value = make_host_tensor(type, std::move(dims));
    // An empty repeated field may have no storage at all: memcpy from its NULL data is undefined even for 0 bytes.
    if (bytes == 0) return value;
    switch (type) {
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_COMPLEX64:
            std::memcpy(value->data, proto.float_data().data(), bytes);
            break;
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_COMPLEX128:
            std::memcpy(value->data, proto.double_data().data(), bytes);
            break;
        case TESS_ELEMENT_INT64:
            std::memcpy(value->data, proto.int64_data().data(), bytes);
            break;
        case TESS_ELEMENT_UINT32:
        case TESS_ELEMENT_UINT64:
            store_truncated(proto.uint64_data(), value->data, element_size(type));
            break;
        case TESS_ELEMENT_INT32:
            std::memcpy(value->data, proto.int32_data().data(), bytes);
            break;
        default:
            if (element_size(type) != 0) {
                // 8- and 16-bit types (bool, float16, bfloat16, float8) keep their bit patterns in int32_data.
                store_truncated(proto.int32_data(), value->data, element_size(type));
            } else if (const size_t bits = element_bits(type); 8 % bits == 0) {
                // 4- and 2-bit types: one int32 per packed storage byte.
                store_truncated(proto.int32_data(), value->data, 1);
            } else {
                // float6: one int32 per element holding its code; higher bits are ignored, as onnx's reader does.
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
