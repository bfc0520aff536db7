#include "model/tensor_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "common/status.h"
#include "model/tensor_proto_data.h"

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
        if (static_cast<size_t>(proto.string_data_size()) != count)
            fail(TESS_STATUS_INVALID_MODEL, "{}: string_data holds {} entries, {} expected", what,
                 proto.string_data_size(), count);
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
    // The data the proto holds itself: checked against the shape before the tensor is allocated.
    if (std::string problem = tensor_proto_data::check(proto, type, count, bytes); !problem.empty())
        fail(TESS_STATUS_INVALID_MODEL, "{}: {}", what, problem);
    ValuePtr value = make_host_tensor(type, std::move(dims));
    if (std::string problem = tensor_proto_data::copy(proto, type, count, bytes, value->data); !problem.empty())
        fail(TESS_STATUS_INVALID_MODEL, "{}: {}", what, problem);
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
    if (std::string problem = tensor_proto_data::check(proto, type, 0, bytes); !problem.empty())
        fail(TESS_STATUS_INVALID_MODEL, "{}: {}", what, problem);
    if (bytes < 4096) return tensor_from_proto(proto, policy, what);  // small: an aligned copy costs nothing
    auto holder = std::make_unique<std::string>();
    holder->swap(*proto.mutable_raw_data());
    ValuePtr value = make_borrowed_tensor(type, std::move(dims), holder->data(), bytes);
    value->deleter = [](void* owner, void*) { delete static_cast<std::string*>(owner); };
    value->deleter_data = holder.release();
    return value;
}

}  // namespace tessera
