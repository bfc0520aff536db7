#include "numpy_io.h"

#include <zip.h>

#include <cstring>
#include <memory>
#include <regex>

#include "onnx_io.h"

namespace tessera::numpy_io {

namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct Dtype {
    const char* descr;  // numpy's little-endian array-protocol type string
    ElementType type;
    size_t size;
};

constexpr Dtype kDtypes[] = {
    {"<f4", TESS_ELEMENT_FLOAT32, 4}, {"<f8", TESS_ELEMENT_FLOAT64, 8}, {"<f2", TESS_ELEMENT_FLOAT16, 2},
    {"|i1", TESS_ELEMENT_INT8, 1},    {"<i2", TESS_ELEMENT_INT16, 2},   {"<i4", TESS_ELEMENT_INT32, 4},
    {"<i8", TESS_ELEMENT_INT64, 8},   {"|u1", TESS_ELEMENT_UINT8, 1},   {"<u2", TESS_ELEMENT_UINT16, 2},
    {"<u4", TESS_ELEMENT_UINT32, 4},  {"<u8", TESS_ELEMENT_UINT64, 8},  {"|b1", TESS_ELEMENT_BOOL, 1},
    {"<c8", TESS_ELEMENT_COMPLEX64, 8}, {"<c16", TESS_ELEMENT_COMPLEX128, 16}};

[[noreturn]] void bad(const std::string& what, const std::string& why) {
    throw Error(TESS_STATUS_INVALID_ARGUMENT, what + " is not a .npy array Tessera reads: " + why);
}

// The value of `key` in the header's Python dict literal ("{'descr': '<f4', 'fortran_order': False, ...}").
std::string header_field(const std::string& header, const std::string& key, const std::string& what) {
    const std::regex pattern("'" + key + R"('\s*:\s*('[^']*'|True|False|\([^)]*\)))");
    std::smatch m;
    if (!std::regex_search(header, m, pattern)) bad(what, "its header has no '" + key + "'");
    return m[1].str();
}

}  // namespace

bool has_npy_dtype(ElementType type) {
    for (const Dtype& d : kDtypes)
        if (d.type == type) return true;
    return false;
}

Value parse_npy(const std::string& bytes, const std::string& what) {
    if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) bad(what, "no NUMPY magic");
    const int major = static_cast<unsigned char>(bytes[6]);
    size_t header_length = 0, header_start = 0;
    if (major == 1) {
        header_length = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) bad(what, "truncated header");
        uint32_t n = 0;
        std::memcpy(&n, bytes.data() + 8, 4);
        header_length = n;
        header_start = 12;
    } else {
        bad(what, "format version " + std::to_string(major));
    }
    if (bytes.size() < header_start + header_length) bad(what, "truncated header");
    const std::string header = bytes.substr(header_start, header_length);

    std::string descr = header_field(header, "descr", what);
    descr = descr.substr(1, descr.size() - 2);
    const Dtype* dtype = nullptr;
    for (const Dtype& d : kDtypes)
        if (descr == d.descr || (d.size == 1 && descr == std::string("<") + (d.descr + 1))) dtype = &d;
    if (dtype == nullptr) bad(what, "dtype '" + descr + "' (big-endian, structured or object arrays are not read)");
    if (header_field(header, "fortran_order", what) != "False")
        bad(what, "it is Fortran-ordered; save it with numpy.ascontiguousarray");

    std::vector<int64_t> dims;
    const std::string shape = header_field(header, "shape", what);
    static const std::regex number(R"(\d+)");
    for (auto it = std::sregex_iterator(shape.begin(), shape.end(), number); it != std::sregex_iterator(); ++it)
        dims.push_back(std::stoll(it->str()));

    Value value = Value::tensor(dtype->type, dims);
    const size_t data_start = header_start + header_length;
    if (bytes.size() - data_start != value.byte_size())
        bad(what, "it holds " + std::to_string(bytes.size() - data_start) + " data bytes but its shape " +
                      onnx_io::format_dims(dims) + " needs " + std::to_string(value.byte_size()));
    if (value.byte_size() > 0) std::memcpy(value.raw_data(), bytes.data() + data_start, value.byte_size());
    return value;
}

Value load_npy(const std::string& path) { return parse_npy(onnx_io::read_file(path), "'" + path + "'"); }

bool save_npy(const std::string& path, ValueView tensor) {
    const Dtype* dtype = nullptr;
    for (const Dtype& d : kDtypes)
        if (d.type == tensor.element_type()) dtype = &d;
    if (dtype == nullptr || !tensor.is_tensor()) return false;
    std::string shape = "(";
    for (int64_t d : tensor.dims()) shape += std::to_string(d) + ", ";
    if (tensor.dims().size() > 1) shape.resize(shape.size() - 2);
    if (tensor.dims().size() == 1) shape.resize(shape.size() - 1);  // "(3,)"
    shape += ")";
    std::string header =
        std::string("{'descr': '") + dtype->descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    // Version 1.0: the header is padded with spaces to a multiple of 64 bytes and ends with a newline.
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string bytes(kMagic, 6);
    bytes += '\x01';
    bytes += '\x00';
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    bytes += header;
    bytes.append(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
    onnx_io::write_file(path, bytes);
    return true;
}

std::vector<std::pair<std::string, Value>> load_npz(const std::string& path) {
    const std::string bytes = onnx_io::read_file(path);  // regular files only, read once
    zip_error_t error;
    zip_error_init(&error);
    zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
    std::unique_ptr<zip_t, decltype(&zip_discard)> archive(
        source != nullptr ? zip_open_from_source(source, ZIP_RDONLY, &error) : nullptr, zip_discard);
    if (!archive) {
        if (source != nullptr) zip_source_free(source);
        const std::string why = zip_error_strerror(&error);
        zip_error_fini(&error);
        throw Error(TESS_STATUS_INVALID_ARGUMENT, "'" + path + "' is not an .npz archive: " + why);
    }
    zip_error_fini(&error);
    std::vector<std::pair<std::string, Value>> arrays;
    const zip_int64_t count = zip_get_num_entries(archive.get(), 0);
    for (zip_int64_t i = 0; i < count; ++i) {
        zip_stat_t stat;
        if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(i), 0, &stat) != 0 ||
            !(stat.valid & ZIP_STAT_SIZE) || !(stat.valid & ZIP_STAT_NAME))
            throw Error(TESS_STATUS_INVALID_ARGUMENT, "'" + path + "': cannot read member " + std::to_string(i));
        std::string name = stat.name;
        const std::string what = "'" + path + "' member '" + name + "'";
        if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0)
            throw Error(TESS_STATUS_INVALID_ARGUMENT, what + " is not an .npy array");
        // The size is what the archive claims; a member claiming more than any input could need is refused before
        // anything is allocated for it.
        constexpr zip_uint64_t kMaxMember = zip_uint64_t(1) << 36;
        if (stat.size > kMaxMember)
            throw Error(TESS_STATUS_INVALID_ARGUMENT, what + " claims " + std::to_string(stat.size) + " bytes");
        std::unique_ptr<zip_file_t, decltype(&zip_fclose)> file(
            zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(i), 0), zip_fclose);
        std::string member(stat.size, '\0');
        if (!file || zip_fread(file.get(), member.data(), stat.size) != static_cast<zip_int64_t>(stat.size))
            throw Error(TESS_STATUS_INVALID_ARGUMENT, what + " cannot be read (corrupt archive?)");
        name.resize(name.size() - 4);
        arrays.emplace_back(name, parse_npy(member, what));
    }
    return arrays;
}

}  // namespace tessera::numpy_io
