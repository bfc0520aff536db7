// Conversion between ONNX protobuf files and Tessera values; see onnx_io.h.
#include "onnx_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <set>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/wire_format_lite.h>

#include "model/tensor_proto_data.h"
#include "tessera/support/element_types.hpp"
#include "tessera/support/float16.hpp"

namespace tessera::onnx_io {
namespace {

[[noreturn]] void fail(StatusCode code, const std::string& message) { throw Error(code, message); }

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// ---- Element encodings -------------------------------------------------------------------------------------

// How a small float format treats its top encodings.
enum class Specials {
    Ieee,             // exponent all ones: infinity (mantissa 0) or NaN
    AllOnesNaN,       // no infinity; only the all-ones magnitude is NaN (float8e4m3fn)
    NegativeZeroNaN,  // no infinity, no -0; the -0 encoding is the single NaN (the *fnuz formats)
    None              // every encoding is a finite number (float4e2m1, float6)
};

// Decodes a sign/exponent/mantissa float of up to 16 bits.
double decode_minifloat(uint32_t bits, int exponent_bits, int mantissa_bits, int bias, Specials specials) {
    const int magnitude_bits = exponent_bits + mantissa_bits;
    const uint32_t magnitude = bits & ((1u << magnitude_bits) - 1);
    const bool negative = ((bits >> magnitude_bits) & 1u) != 0;
    const uint32_t exponent = magnitude >> mantissa_bits;
    const uint32_t mantissa = magnitude & ((1u << mantissa_bits) - 1);
    const uint32_t max_exponent = (1u << exponent_bits) - 1;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (specials) {
        case Specials::Ieee:
            if (exponent == max_exponent)
                return mantissa != 0 ? nan : (negative ? -HUGE_VAL : HUGE_VAL);
            break;
        case Specials::AllOnesNaN:
            if (magnitude == (1u << magnitude_bits) - 1) return nan;
            break;
        case Specials::NegativeZeroNaN:
            if (negative && magnitude == 0) return nan;
            break;
        case Specials::None: break;
    }
    const double value = exponent == 0
                             ? std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits)
                             : std::ldexp(static_cast<double>(mantissa | (1u << mantissa_bits)),
                                          static_cast<int>(exponent) - bias - mantissa_bits);
    return negative ? -value : value;
}

// Bits per element of the packed sub-byte types; 0 for every other type.
unsigned packed_bits(ElementType type) {
    const support::ElementTypeInfo info = support::element_type_info(type);
    return info.bytes == 0 ? static_cast<unsigned>(info.bits) : 0;
}

// Element `index` of a packed tensor: one bit stream, low bits first (a 6-bit element may straddle two bytes).
uint32_t packed_field(const void* data, size_t index, unsigned bits) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    const size_t bit = index * bits;
    uint32_t field = bytes[bit / 8] >> (bit % 8);
    if (bit % 8 + bits > 8) field |= static_cast<uint32_t>(bytes[bit / 8 + 1]) << (8 - bit % 8);
    return field & ((1u << bits) - 1);
}

int32_t sign_extend(uint32_t value, unsigned bits) {
    const uint32_t sign = 1u << (bits - 1);
    return static_cast<int32_t>(value ^ sign) - static_cast<int32_t>(sign);
}

template <typename T>
T load(const void* data, size_t index) {
    T v;
    std::memcpy(&v, static_cast<const uint8_t*>(data) + index * sizeof(T), sizeof(T));
    return v;
}

bool is_complex(ElementType type) { return type == TESS_ELEMENT_COMPLEX64 || type == TESS_ELEMENT_COMPLEX128; }

std::complex<double> element_as_complex(ElementType type, const void* data, size_t index) {
    if (type == TESS_ELEMENT_COMPLEX64) return {load<float>(data, 2 * index), load<float>(data, 2 * index + 1)};
    if (type == TESS_ELEMENT_COMPLEX128) return {load<double>(data, 2 * index), load<double>(data, 2 * index + 1)};
    return {element_as_double(type, data, index), 0.0};
}

bool is_integral(ElementType type) {
    switch (type) {
        case TESS_ELEMENT_UINT8: case TESS_ELEMENT_INT8: case TESS_ELEMENT_UINT16: case TESS_ELEMENT_INT16:
        case TESS_ELEMENT_INT32: case TESS_ELEMENT_INT64: case TESS_ELEMENT_UINT32: case TESS_ELEMENT_UINT64:
        case TESS_ELEMENT_BOOL: case TESS_ELEMENT_UINT4: case TESS_ELEMENT_INT4: case TESS_ELEMENT_UINT2:
        case TESS_ELEMENT_INT2: return true;
        default: return false;
    }
}

// One element printed exactly: integers in full, float32 with 9 significant digits, float64 with 17.
std::string format_element(ElementType type, const void* data, size_t index) {
    char buf[64];
    switch (type) {
        case TESS_ELEMENT_INT64: std::snprintf(buf, sizeof buf, "%" PRId64, load<int64_t>(data, index)); break;
        case TESS_ELEMENT_UINT64: std::snprintf(buf, sizeof buf, "%" PRIu64, load<uint64_t>(data, index)); break;
        case TESS_ELEMENT_BOOL: return load<uint8_t>(data, index) != 0 ? "true" : "false";
        case TESS_ELEMENT_FLOAT64: std::snprintf(buf, sizeof buf, "%.17g", load<double>(data, index)); break;
        case TESS_ELEMENT_COMPLEX64:
        case TESS_ELEMENT_COMPLEX128: {
            const std::complex<double> c = element_as_complex(type, data, index);
            std::snprintf(buf, sizeof buf, "(%.9g%+.9gj)", c.real(), c.imag());
            break;
        }
        default:
            std::snprintf(buf, sizeof buf, is_integral(type) ? "%.0f" : "%.9g", element_as_double(type, data, index));
    }
    return buf;
}

std::string format_double(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

// "[1, 0, 3]": the multi-index of flat element `index` in a tensor of `dims`.
std::string unravel(size_t index, const std::vector<int64_t>& dims) {
    std::vector<int64_t> position(dims.size());
    for (size_t d = dims.size(); d-- > 0;) {
        const auto extent = static_cast<size_t>(dims[d]);
        position[d] = static_cast<int64_t>(index % extent);
        index /= extent;
    }
    return format_dims(position);
}

// ---- Protobuf -> tensor ------------------------------------------------------------------------------------

std::string tensor_label(const onnx::TensorProto& proto) {
    return proto.name().empty() ? std::string("tensor") : "tensor " + quoted(proto.name());
}

// The tensor's dims, refused when they do not fit the data the proto carries: checked before allocating, so that a
// file of the wrong kind (whose bytes parse as absurd dims) is an error rather than a huge allocation.
std::vector<int64_t> proto_dims(const onnx::TensorProto& proto, ElementType type) {
    std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
    uint64_t count = 1;
    for (int64_t d : dims) {
        if (d < 0) fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + " has a negative dimension");
        if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count))
            fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + " has an impossible shape");
    }
    const size_t bytes = tess_element_storage_bytes(type, count);
    if (type == TESS_ELEMENT_STRING) {
        if (static_cast<uint64_t>(proto.string_data_size()) != count)
            fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + ": string_data holds " +
                                                   std::to_string(proto.string_data_size()) + " entries, " +
                                                   std::to_string(count) + " expected");
    } else if (std::string problem = tensor_proto_data::check(proto, type, count, bytes); !problem.empty()) {
        fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + " of shape " + format_dims(dims) + " and type " +
                                               element_type_name(type) + ": " + problem);
    }
    return dims;
}

// Parses `bytes` as a Proto.  Protobuf accepts many a wrong message kind (a TensorProto parses as an empty
// OptionalProto), so with `no_unknown_fields` leftover fields also reject the file; that check is kept off for
// TensorProto, which newer ONNX versions still grow.
template <typename Proto>
Proto parse_as(const std::string& bytes, const std::string& path, const char* what, bool no_unknown_fields) {
    Proto proto;
    if (!proto.ParseFromString(bytes) ||
        (no_unknown_fields && proto.GetReflection()->GetUnknownFields(proto).field_count() > 0))
        fail(TESS_STATUS_INVALID_ARGUMENT, quoted(path) + " is not a valid " + what);
    return proto;
}

ElementType innermost_element_type(const onnx::TypeProto& type) {
    switch (type.value_case()) {
        case onnx::TypeProto::kTensorType: return static_cast<ElementType>(type.tensor_type().elem_type());
        case onnx::TypeProto::kSequenceType: return innermost_element_type(type.sequence_type().elem_type());
        case onnx::TypeProto::kOptionalType: return innermost_element_type(type.optional_type().elem_type());
        default: return TESS_ELEMENT_UNDEFINED;
    }
}

int32_t proto_kind_of(ValueKind kind) {
    switch (kind) {
        case TESS_VALUE_SEQUENCE: return onnx::SequenceProto::SEQUENCE;
        case TESS_VALUE_OPTIONAL: return onnx::SequenceProto::OPTIONAL;
        default: return onnx::SequenceProto::TENSOR;
    }
}

std::string compare_tensors(ValueView actual, ValueView expected, const Tolerance& tol);

}  // namespace

// ---- Files and models --------------------------------------------------------------------------------------

namespace {

// Opens a file that must be a regular one.  O_NONBLOCK keeps a FIFO from blocking the open; the check is made on the
// opened descriptor, so the file cannot be swapped between check and read.  Returns the descriptor and its size.
std::pair<int, size_t> open_regular_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int error = errno;
        fail(error == ENOENT ? TESS_STATUS_NOT_FOUND : TESS_STATUS_INVALID_ARGUMENT,
             "cannot read " + quoted(path) + ": " + std::strerror(error));
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        ::close(fd);
        fail(TESS_STATUS_INVALID_ARGUMENT,
             quoted(path) + (S_ISDIR(info.st_mode) ? " is a directory, not a file" : " is not a regular file"));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return {fd, static_cast<size_t>(info.st_size)};
}

}  // namespace

std::string read_file(const std::string& path) {
    const auto [fd, size] = open_regular_file(path);
    std::string bytes(size, '\0');
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::read(fd, bytes.data() + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    ::close(fd);
    if (done != size) fail(TESS_STATUS_RUNTIME_ERROR, "cannot read " + quoted(path) + ": it changed while being read");
    return bytes;
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail(TESS_STATUS_NOT_FOUND, "cannot write " + quoted(path) + ": " + std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) fail(TESS_STATUS_RUNTIME_ERROR, "cannot write " + quoted(path));
}

onnx::ModelProto parse_model(const void* data, size_t size) {
    onnx::ModelProto model;
    if (size > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !model.ParseFromArray(data, static_cast<int>(size)))
        fail(TESS_STATUS_INVALID_MODEL, "not a valid ONNX model (ModelProto)");
    return model;
}

namespace {

using google::protobuf::internal::WireFormatLite;

// Copies the graph's inputs, and its initializers' names only, from a serialized GraphProto: the weights, the bulk
// of a model, are skipped, never held in memory.
bool read_graph_interface(google::protobuf::io::CodedInputStream& in, onnx::GraphProto& graph) {
    constexpr int kInitializer = 5, kInput = 11;
    while (const uint32_t tag = in.ReadTag()) {
        const int field = WireFormatLite::GetTagFieldNumber(tag);
        const bool message = WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
        if (message && field == kInput) {
            if (!WireFormatLite::ReadMessage(&in, graph.add_input())) return false;
        } else if (message && field == kInitializer) {
            // TensorProto: keep field 8 (name), skip the rest (dims, raw_data, ...).
            const auto limit = in.ReadLengthAndPushLimit();
            onnx::TensorProto* init = graph.add_initializer();
            while (const uint32_t inner = in.ReadTag()) {
                if (WireFormatLite::GetTagFieldNumber(inner) == 8 &&
                    WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
                    if (!WireFormatLite::ReadString(&in, init->mutable_name())) return false;
                } else if (!WireFormatLite::SkipField(&in, inner)) {
                    return false;
                }
            }
            if (!in.ConsumedEntireMessage() || !in.CheckEntireMessageConsumedAndPopLimit(limit)) return false;
        } else if (!WireFormatLite::SkipField(&in, tag)) {
            return false;
        }
    }
    return in.ConsumedEntireMessage();
}

onnx::ModelProto read_model_interface(google::protobuf::io::CodedInputStream& in) {
    constexpr int kGraph = 7;
    in.SetTotalBytesLimit(std::numeric_limits<int>::max());
    onnx::ModelProto model;
    bool ok = true;
    while (ok) {
        const uint32_t tag = in.ReadTag();
        if (tag == 0) break;
        if (WireFormatLite::GetTagFieldNumber(tag) == kGraph &&
            WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
            const auto limit = in.ReadLengthAndPushLimit();
            ok = read_graph_interface(in, *model.mutable_graph()) && in.CheckEntireMessageConsumedAndPopLimit(limit);
        } else {
            ok = WireFormatLite::SkipField(&in, tag);
        }
    }
    if (!ok || !in.ConsumedEntireMessage()) fail(TESS_STATUS_INVALID_MODEL, "not a valid ONNX model (ModelProto)");
    return model;
}

}  // namespace

onnx::ModelProto parse_model_interface(const void* data, size_t size) {
    if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
        fail(TESS_STATUS_INVALID_MODEL, "not a valid ONNX model (ModelProto)");
    google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data), static_cast<int>(size));
    return read_model_interface(in);
}

onnx::ModelProto load_model_interface(const std::string& path) {
    const int fd = open_regular_file(path).first;
    google::protobuf::io::FileInputStream file(fd);
    file.SetCloseOnDelete(true);
    try {
        google::protobuf::io::CodedInputStream in(&file);
        return read_model_interface(in);
    } catch (const Error& e) {
        fail(e.code(), quoted(path) + " is " + e.what());
    }
}

onnx::ModelProto load_model(const std::string& path) {
    const std::string bytes = read_file(path);
    try {
        return parse_model(bytes.data(), bytes.size());
    } catch (const Error& e) {
        fail(e.code(), quoted(path) + " is " + e.what());
    }
}

// ---- Declared types ----------------------------------------------------------------------------------------

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& proto) {
    ValueInfo info;
    info.name = proto.name();
    const onnx::TypeProto& type = proto.type();
    info.element_type = innermost_element_type(type);
    switch (type.value_case()) {
        case onnx::TypeProto::kTensorType: {
            info.kind = TESS_VALUE_TENSOR;
            const auto& tensor = type.tensor_type();
            info.has_shape = tensor.has_shape();
            for (const auto& dim : tensor.shape().dim()) {
                info.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
                info.dim_params.push_back(dim.has_dim_param() ? dim.dim_param() : "");
            }
            break;
        }
        case onnx::TypeProto::kSequenceType: info.kind = TESS_VALUE_SEQUENCE; break;
        case onnx::TypeProto::kOptionalType: info.kind = TESS_VALUE_OPTIONAL; break;
        case onnx::TypeProto::kMapType: info.kind = TESS_VALUE_MAP; break;
        default: info.kind = TESS_VALUE_UNKNOWN; break;
    }
    return info;
}

std::vector<ValueInfo> graph_inputs(const onnx::ModelProto& model) {
    std::set<std::string> initializers;
    for (const auto& init : model.graph().initializer()) initializers.insert(init.name());
    std::vector<ValueInfo> out;
    for (const auto& input : model.graph().input())
        if (initializers.count(input.name()) == 0) out.push_back(value_info_from_proto(input));
    return out;
}

std::vector<ValueInfo> graph_outputs(const onnx::ModelProto& model) {
    std::vector<ValueInfo> out;
    for (const auto& output : model.graph().output()) out.push_back(value_info_from_proto(output));
    return out;
}

std::string format_dims(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

namespace {

// "[1, 3, N, ?]": fixed sizes, symbolic names, "?" for the rest.
std::string declared_shape(const ValueInfo& type) {
    std::string s = "[";
    for (size_t i = 0; i < type.dims.size(); ++i) {
        if (i) s += ", ";
        if (type.dims[i] >= 0) s += std::to_string(type.dims[i]);
        else s += i < type.dim_params.size() && !type.dim_params[i].empty() ? type.dim_params[i] : "?";
    }
    return s + "]";
}

}  // namespace

std::string describe_type(const ValueInfo& type) {
    const std::string s = std::string(value_kind_name(type.kind)) + "(" + element_type_name(type.element_type) + ")";
    if (type.kind != TESS_VALUE_TENSOR) return s;
    return s + (type.has_shape ? " " + declared_shape(type) : " (rank unknown)");
}

std::string describe_value(ValueView value) {
    if (!value) return "nothing";
    std::string s = std::string(value_kind_name(value.kind())) + "(" + element_type_name(value.element_type()) + ")";
    switch (value.kind()) {
        case TESS_VALUE_TENSOR: return s + " " + format_dims(value.dims());
        case TESS_VALUE_SEQUENCE: return s + " of " + std::to_string(value.sequence_length());
        case TESS_VALUE_OPTIONAL:
            return value.has_value() ? s + " holding " + describe_value(value.value()) : s + " empty";
        default: return s;
    }
}

std::string check_matches(ValueView value, const ValueInfo& declared) {
    if (!value) return "no value";
    if (declared.kind != TESS_VALUE_UNKNOWN && value.kind() != declared.kind)
        return std::string("expected a ") + value_kind_name(declared.kind) + ", got a " + value_kind_name(value.kind());
    if (declared.element_type != TESS_ELEMENT_UNDEFINED && value.element_type() != declared.element_type)
        return "expected element type " + element_type_name(declared.element_type) + ", got " +
               element_type_name(value.element_type());
    if (value.kind() != TESS_VALUE_TENSOR || !declared.has_shape) return "";
    const std::vector<int64_t> dims = value.dims();
    bool ok = dims.size() == declared.dims.size();
    for (size_t i = 0; ok && i < dims.size(); ++i) ok = declared.dims[i] < 0 || declared.dims[i] == dims[i];
    if (!ok) return "expected shape " + declared_shape(declared) + ", got " + format_dims(dims);
    return "";
}

// ---- Protobuf <-> values -----------------------------------------------------------------------------------

Value tensor_from_proto(const onnx::TensorProto& proto) {
    const auto type = static_cast<ElementType>(proto.data_type());
    if (type == TESS_ELEMENT_UNDEFINED) fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + " has no data type");
    if (proto.data_location() == onnx::TensorProto::EXTERNAL)
        fail(TESS_STATUS_NOT_IMPLEMENTED, tensor_label(proto) + " uses external data, which value files may not");
    if (proto.has_segment()) fail(TESS_STATUS_NOT_IMPLEMENTED, tensor_label(proto) + " is segmented");

    Value value = Value::tensor(type, proto_dims(proto, type));
    const size_t count = value.element_count();
    if (type == TESS_ELEMENT_STRING) {
        for (size_t i = 0; i < count; ++i) value.set_string(i, proto.string_data(static_cast<int>(i)));
        return value;
    }
    if (std::string problem = tensor_proto_data::copy(proto, type, count, value.byte_size(), value.raw_data());
        !problem.empty())
        fail(TESS_STATUS_INVALID_ARGUMENT, tensor_label(proto) + ": " + problem);
    return value;
}

Value sequence_from_proto(const onnx::SequenceProto& proto, ElementType element_type) {
    std::vector<Value> items;
    int32_t kind = proto.elem_type();
    if (kind == onnx::SequenceProto::UNDEFINED)  // lenient: whichever list is filled
        kind = proto.sequence_values_size() ? onnx::SequenceProto::SEQUENCE
               : proto.optional_values_size() ? onnx::SequenceProto::OPTIONAL
                                              : onnx::SequenceProto::TENSOR;
    switch (kind) {
        case onnx::SequenceProto::TENSOR:
            for (const auto& t : proto.tensor_values()) items.push_back(tensor_from_proto(t));
            break;
        case onnx::SequenceProto::SEQUENCE:
            for (const auto& s : proto.sequence_values()) items.push_back(sequence_from_proto(s, element_type));
            break;
        case onnx::SequenceProto::OPTIONAL:
            for (const auto& o : proto.optional_values()) items.push_back(optional_from_proto(o, element_type));
            break;
        default:
            fail(TESS_STATUS_NOT_IMPLEMENTED, "sequences of maps or sparse tensors are not supported");
    }
    const ElementType type = items.empty() ? element_type : items.front().element_type();
    return Value::sequence(type, std::move(items));
}

Value optional_from_proto(const onnx::OptionalProto& proto, ElementType element_type) {
    Value inner;
    if (proto.has_tensor_value()) {
        inner = tensor_from_proto(proto.tensor_value());
    } else if (proto.has_sequence_value()) {
        inner = sequence_from_proto(proto.sequence_value(), element_type);
    } else if (proto.has_optional_value()) {
        inner = optional_from_proto(proto.optional_value(), element_type);
    } else if (proto.has_map_value() || proto.has_sparse_tensor_value()) {
        fail(TESS_STATUS_NOT_IMPLEMENTED, "optionals of maps or sparse tensors are not supported");
    }
    const ElementType type = inner ? inner.element_type() : element_type;
    return Value::optional(type, std::move(inner));
}

Value load_value(const std::string& path, const ValueInfo& declared) {
    const std::string bytes = read_file(path);
    try {
        switch (declared.kind) {
            case TESS_VALUE_SEQUENCE:
                return sequence_from_proto(parse_as<onnx::SequenceProto>(bytes, path, "SequenceProto", true),
                                           declared.element_type);
            case TESS_VALUE_OPTIONAL:
                return optional_from_proto(parse_as<onnx::OptionalProto>(bytes, path, "OptionalProto", true),
                                           declared.element_type);
            case TESS_VALUE_MAP: fail(TESS_STATUS_NOT_IMPLEMENTED, "map values are not supported");
            default: return tensor_from_proto(parse_as<onnx::TensorProto>(bytes, path, "TensorProto", false));
        }
    } catch (const Error& e) {
        if (std::string(e.what()).find(path) != std::string::npos) throw;
        fail(e.code(), quoted(path) + ": " + e.what());
    }
}

onnx::TensorProto tensor_to_proto(ValueView tensor, const std::string& name) {
    if (!tensor || tensor.kind() != TESS_VALUE_TENSOR)
        fail(TESS_STATUS_INVALID_ARGUMENT, "tensor_to_proto: " + describe_value(tensor) + " is not a tensor");
    onnx::TensorProto proto;
    proto.set_name(name);
    proto.set_data_type(tensor.element_type());
    for (int64_t d : tensor.dims()) proto.add_dims(d);
    if (tensor.element_type() == TESS_ELEMENT_STRING) {
        for (size_t i = 0, n = tensor.element_count(); i < n; ++i)
            proto.add_string_data(std::string(tensor.string_at(i)));
    } else {
        proto.set_raw_data(tensor.raw_data(), tensor.byte_size());
    }
    return proto;
}

onnx::SequenceProto sequence_to_proto(ValueView sequence, const std::string& name) {
    onnx::SequenceProto proto;
    proto.set_name(name);
    const size_t n = sequence.sequence_length();
    proto.set_elem_type(n ? proto_kind_of(sequence.item(0).kind()) : onnx::SequenceProto::TENSOR);
    for (size_t i = 0; i < n; ++i) {
        const ValueView item = sequence.item(i);
        switch (item.kind()) {
            case TESS_VALUE_TENSOR: *proto.add_tensor_values() = tensor_to_proto(item, ""); break;
            case TESS_VALUE_SEQUENCE: *proto.add_sequence_values() = sequence_to_proto(item, ""); break;
            case TESS_VALUE_OPTIONAL: *proto.add_optional_values() = optional_to_proto(item, ""); break;
            default: fail(TESS_STATUS_NOT_IMPLEMENTED, "cannot write a sequence item of kind " +
                                                           std::string(value_kind_name(item.kind())));
        }
    }
    return proto;
}

onnx::OptionalProto optional_to_proto(ValueView optional, const std::string& name) {
    onnx::OptionalProto proto;
    proto.set_name(name);
    if (!optional.has_value()) {
        proto.set_elem_type(onnx::OptionalProto::UNDEFINED);  // what onnx writes for an empty optional
        return proto;
    }
    const ValueView inner = optional.value();
    proto.set_elem_type(proto_kind_of(inner.kind()));
    switch (inner.kind()) {
        case TESS_VALUE_TENSOR: *proto.mutable_tensor_value() = tensor_to_proto(inner, ""); break;
        case TESS_VALUE_SEQUENCE: *proto.mutable_sequence_value() = sequence_to_proto(inner, ""); break;
        case TESS_VALUE_OPTIONAL: *proto.mutable_optional_value() = optional_to_proto(inner, ""); break;
        default: fail(TESS_STATUS_NOT_IMPLEMENTED, "cannot write an optional holding a " +
                                                       std::string(value_kind_name(inner.kind())));
    }
    return proto;
}

void save_value(const std::string& path, ValueView value, const std::string& name) {
    std::string bytes;
    switch (value.kind()) {
        case TESS_VALUE_TENSOR: bytes = tensor_to_proto(value, name).SerializeAsString(); break;
        case TESS_VALUE_SEQUENCE: bytes = sequence_to_proto(value, name).SerializeAsString(); break;
        case TESS_VALUE_OPTIONAL: bytes = optional_to_proto(value, name).SerializeAsString(); break;
        default: fail(TESS_STATUS_NOT_IMPLEMENTED, "cannot write a " + std::string(value_kind_name(value.kind())));
    }
    write_file(path, bytes);
}

// ---- Comparison --------------------------------------------------------------------------------------------

std::string compare_values(ValueView actual, ValueView expected, const Tolerance& tolerance) {
    if (!actual && !expected) return "";
    if (!actual || !expected) return "got " + describe_value(actual) + ", expected " + describe_value(expected);
    if (actual.kind() != expected.kind())
        return std::string("got a ") + value_kind_name(actual.kind()) + ", expected a " +
               value_kind_name(expected.kind());
    switch (expected.kind()) {
        case TESS_VALUE_TENSOR: return compare_tensors(actual, expected, tolerance);
        case TESS_VALUE_SEQUENCE: {
            const size_t n = expected.sequence_length();
            if (actual.sequence_length() != n)
                return "sequence length mismatch: got " + std::to_string(actual.sequence_length()) + ", expected " +
                       std::to_string(n);
            for (size_t i = 0; i < n; ++i) {
                const std::string why = compare_values(actual.item(i), expected.item(i), tolerance);
                if (!why.empty()) return "sequence item " + std::to_string(i) + ": " + why;
            }
            return "";
        }
        case TESS_VALUE_OPTIONAL:
            if (actual.has_value() != expected.has_value())
                return std::string("optional: got ") + (actual.has_value() ? "a value" : "none") + ", expected " +
                       (expected.has_value() ? "a value" : "none");
            return expected.has_value() ? compare_values(actual.value(), expected.value(), tolerance) : "";
        default: return std::string("cannot compare values of kind ") + value_kind_name(expected.kind());
    }
}

namespace {

std::string compare_strings(ValueView actual, ValueView expected) {
    const size_t n = expected.element_count();
    size_t differing = 0, first = 0;
    for (size_t i = 0; i < n; ++i)
        if (actual.string_at(i) != expected.string_at(i) && differing++ == 0) first = i;
    if (differing == 0) return "";
    auto shorten = [](std::string_view s) {
        std::string out = "\"";
        out.append(s.substr(0, 60));
        out += s.size() > 60 ? "...\"" : "\"";
        return out;
    };
    return std::to_string(differing) + " of " + std::to_string(n) + " strings differ; first at " +
           unravel(first, expected.dims()) + ": got " + shorten(actual.string_at(first)) + ", expected " +
           shorten(expected.string_at(first));
}

std::string compare_tensors(ValueView actual, ValueView expected, const Tolerance& tol) {
    const ElementType type = expected.element_type();
    if (actual.element_type() != type)
        return "element type mismatch: got " + element_type_name(actual.element_type()) + ", expected " +
               element_type_name(type);
    const std::vector<int64_t> dims = expected.dims();
    if (actual.dims() != dims)
        return "shape mismatch: got " + format_dims(actual.dims()) + ", expected " + format_dims(dims);
    if (type == TESS_ELEMENT_STRING) return compare_strings(actual, expected);

    const void* a = actual.raw_data();
    const void* e = expected.raw_data();
    const size_t n = expected.element_count();
    const bool complex = is_complex(type);
    size_t differing = 0, first = 0;
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; ++i) {
        const std::complex<double> x = complex ? element_as_complex(type, a, i) : element_as_double(type, a, i);
        const std::complex<double> y = complex ? element_as_complex(type, e, i) : element_as_double(type, e, i);
        const bool x_nan = std::isnan(x.real()) || std::isnan(x.imag());
        const bool y_nan = std::isnan(y.real()) || std::isnan(y.imag());
        const bool x_inf = std::isinf(x.real()) || std::isinf(x.imag());
        const bool y_inf = std::isinf(y.real()) || std::isinf(y.imag());
        const double diff = std::abs(x - y);
        bool close;
        if (x_nan || y_nan) close = x_nan && y_nan;
        else if (x_inf || y_inf) close = x == y;
        else close = diff <= tol.atol + tol.rtol * std::abs(y);
        if (close) continue;
        if (differing++ == 0) first = i;
        if (!x_nan && !y_nan && !x_inf && !y_inf) {
            max_abs = std::max(max_abs, diff);
            max_rel = std::max(max_rel, y == 0.0 ? HUGE_VAL : diff / std::abs(y));
        }
    }
    if (differing == 0) return "";
    char tolerance[96];
    std::snprintf(tolerance, sizeof tolerance, "rtol=%g, atol=%g", tol.rtol, tol.atol);
    std::string message = std::to_string(differing) + " of " + std::to_string(n) + " elements differ (" + tolerance +
                          "); first at " + unravel(first, dims) + ": got " + format_element(type, a, first) +
                          ", expected " + format_element(type, e, first);
    if (max_abs > 0 || max_rel > 0)
        message += "; max abs difference " + format_double(max_abs) + ", max rel difference " +
                   format_double(max_rel);
    return message;
}

}  // namespace

// ---- Generated inputs --------------------------------------------------------------------------------------

Value light_input(const ValueInfo& declared) {
    if ((declared.kind != TESS_VALUE_TENSOR && declared.kind != TESS_VALUE_UNKNOWN) ||
        declared.element_type != TESS_ELEMENT_FLOAT32)
        fail(TESS_STATUS_INVALID_ARGUMENT, "input " + quoted(declared.name) + " is " + describe_type(declared) +
                                               "; the light-model rule only generates float tensors");
    return generated_input(declared);
}

Value generated_input(const ValueInfo& declared) {
    const ElementType type = declared.element_type;
    if (type == TESS_ELEMENT_UNDEFINED)
        fail(TESS_STATUS_INVALID_ARGUMENT, "input " + quoted(declared.name) + " has no declared element type");
    if (declared.kind == TESS_VALUE_SEQUENCE) return Value::sequence(type, {});
    if (declared.kind == TESS_VALUE_OPTIONAL) return Value::optional(type);
    if (declared.kind != TESS_VALUE_TENSOR && declared.kind != TESS_VALUE_UNKNOWN)
        fail(TESS_STATUS_NOT_IMPLEMENTED, "cannot generate an input of type " + describe_type(declared));

    std::vector<int64_t> dims;  // unknown dimensions count as 1, an unknown rank as a scalar (as onnx does)
    for (int64_t d : declared.dims) dims.push_back(d < 0 ? 1 : d);
    Value value = Value::tensor(type, dims);  // zero-filled: the answer for every non-float type
    const size_t n = value.element_count();
    // arange(n) / n, computed in double and rounded once to the element type, as numpy does.
    auto light = [n](size_t i) { return static_cast<float>(static_cast<double>(i) / static_cast<double>(n)); };
    switch (type) {
        case TESS_ELEMENT_FLOAT32: {
            float* out = value.data<float>();
            for (size_t i = 0; i < n; ++i) out[i] = light(i);
            break;
        }
        case TESS_ELEMENT_FLOAT64: {
            double* out = value.data<double>();
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(i) / static_cast<double>(n);
            break;
        }
        case TESS_ELEMENT_FLOAT16:
        case TESS_ELEMENT_BFLOAT16: {
            uint16_t* out = value.data<uint16_t>();
            for (size_t i = 0; i < n; ++i)
                out[i] = type == TESS_ELEMENT_FLOAT16 ? support::float_to_half(light(i)) : support::float_to_bfloat16(light(i));
            break;
        }
        default: break;
    }
    return value;
}

// ---- Inspection --------------------------------------------------------------------------------------------

bool is_floating_point(ElementType type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: case TESS_ELEMENT_FLOAT64: case TESS_ELEMENT_FLOAT16: case TESS_ELEMENT_BFLOAT16:
        case TESS_ELEMENT_FLOAT8E4M3FN: case TESS_ELEMENT_FLOAT8E4M3FNUZ: case TESS_ELEMENT_FLOAT8E5M2:
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: case TESS_ELEMENT_FLOAT4E2M1: case TESS_ELEMENT_FLOAT8E8M0:
        case TESS_ELEMENT_FLOAT6E2M3: case TESS_ELEMENT_FLOAT6E3M2: return true;
        default: return false;
    }
}

double element_as_double(ElementType type, const void* data, size_t index) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return load<float>(data, index);
        case TESS_ELEMENT_FLOAT64: return load<double>(data, index);
        case TESS_ELEMENT_FLOAT16: return decode_minifloat(load<uint16_t>(data, index), 5, 10, 15, Specials::Ieee);
        case TESS_ELEMENT_BFLOAT16: return decode_minifloat(load<uint16_t>(data, index), 8, 7, 127, Specials::Ieee);
        case TESS_ELEMENT_FLOAT8E4M3FN:
            return decode_minifloat(load<uint8_t>(data, index), 4, 3, 7, Specials::AllOnesNaN);
        case TESS_ELEMENT_FLOAT8E4M3FNUZ:
            return decode_minifloat(load<uint8_t>(data, index), 4, 3, 8, Specials::NegativeZeroNaN);
        case TESS_ELEMENT_FLOAT8E5M2: return decode_minifloat(load<uint8_t>(data, index), 5, 2, 15, Specials::Ieee);
        case TESS_ELEMENT_FLOAT8E5M2FNUZ:
            return decode_minifloat(load<uint8_t>(data, index), 5, 2, 16, Specials::NegativeZeroNaN);
        case TESS_ELEMENT_FLOAT8E8M0: {  // exponent only: 2^(e - 127), 0xFF is NaN
            const uint8_t e = load<uint8_t>(data, index);
            return e == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, e - 127);
        }
        case TESS_ELEMENT_FLOAT4E2M1: return decode_minifloat(packed_field(data, index, 4), 2, 1, 1, Specials::None);
        case TESS_ELEMENT_FLOAT6E2M3: return decode_minifloat(packed_field(data, index, 6), 2, 3, 1, Specials::None);
        case TESS_ELEMENT_FLOAT6E3M2: return decode_minifloat(packed_field(data, index, 6), 3, 2, 3, Specials::None);
        case TESS_ELEMENT_UINT8: return load<uint8_t>(data, index);
        case TESS_ELEMENT_INT8: return load<int8_t>(data, index);
        case TESS_ELEMENT_UINT16: return load<uint16_t>(data, index);
        case TESS_ELEMENT_INT16: return load<int16_t>(data, index);
        case TESS_ELEMENT_INT32: return load<int32_t>(data, index);
        case TESS_ELEMENT_INT64: return static_cast<double>(load<int64_t>(data, index));
        case TESS_ELEMENT_UINT32: return load<uint32_t>(data, index);
        case TESS_ELEMENT_UINT64: return static_cast<double>(load<uint64_t>(data, index));
        case TESS_ELEMENT_BOOL: return load<uint8_t>(data, index) != 0 ? 1.0 : 0.0;
        case TESS_ELEMENT_UINT4: return packed_field(data, index, 4);
        case TESS_ELEMENT_INT4: return sign_extend(packed_field(data, index, 4), 4);
        case TESS_ELEMENT_UINT2: return packed_field(data, index, 2);
        case TESS_ELEMENT_INT2: return sign_extend(packed_field(data, index, 2), 2);
        case TESS_ELEMENT_COMPLEX64:
        case TESS_ELEMENT_COMPLEX128: return element_as_complex(type, data, index).real();
        default: return std::numeric_limits<double>::quiet_NaN();
    }
}

std::string summarize(ValueView value, size_t max_values) {
    if (!value) return "nothing";
    switch (value.kind()) {
        case TESS_VALUE_SEQUENCE: {
            const size_t n = value.sequence_length();
            std::string s = std::to_string(n) + (n == 1 ? " item" : " items");
            if (n > 0) s += "; item 0: " + describe_value(value.item(0)) + " " + summarize(value.item(0), max_values);
            return s;
        }
        case TESS_VALUE_OPTIONAL:
            return value.has_value() ? summarize(value.value(), max_values) : "(no value)";
        case TESS_VALUE_TENSOR: break;
        default: return "";
    }
    const ElementType type = value.element_type();
    const size_t n = value.element_count();
    if (n == 0) return "(no elements)";
    const size_t shown = std::min(n, max_values);
    std::string s = "[";
    for (size_t i = 0; i < shown; ++i) {
        if (i) s += ", ";
        if (type == TESS_ELEMENT_STRING) {
            const std::string_view text = value.string_at(i);
            s += "\"" + std::string(text.substr(0, 24)) + (text.size() > 24 ? "...\"" : "\"");
        } else {
            s += format_element(type, value.raw_data(), i);
        }
    }
    s += n > shown ? ", ...]" : "]";
    if (type == TESS_ELEMENT_STRING || is_complex(type)) return s;

    double lo = HUGE_VAL, hi = -HUGE_VAL, sum = 0;
    size_t nan_count = 0;
    for (size_t i = 0; i < n; ++i) {
        const double v = element_as_double(type, value.raw_data(), i);
        if (std::isnan(v)) {
            ++nan_count;
            continue;
        }
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
    }
    if (nan_count < n)
        s += "  min " + format_double(lo) + "  max " + format_double(hi) + "  mean " +
             format_double(sum / static_cast<double>(n - nan_count));
    if (nan_count) s += "  (" + std::to_string(nan_count) + " NaN)";
    return s;
}

// ---- Backend-test cases ------------------------------------------------------------------------------------------

Tolerance case_tolerance(const std::string& case_dir) {
    Tolerance tolerance;
    std::ifstream in(case_dir + "/data.json");
    if (!in) return tolerance;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    static const std::regex number_field(R"re("(rtol|atol)"\s*:\s*([-+0-9.eE]+))re");
    for (std::sregex_iterator it(text.begin(), text.end(), number_field), end; it != end; ++it)
        ((*it)[1] == "rtol" ? tolerance.rtol : tolerance.atol) = std::strtod((*it)[2].str().c_str(), nullptr);
    return tolerance;
}

std::vector<std::string> numbered_files(const std::string& dir, const char* prefix) {
    std::vector<std::string> files;
    for (size_t k = 0;; ++k) {
        std::string path = dir + "/" + prefix + std::to_string(k) + ".pb";
        if (::access(path.c_str(), F_OK) != 0) return files;
        files.push_back(std::move(path));
    }
}

std::vector<std::string> model_operators(const std::string& model_path) {
    std::set<std::string> ops;
    try {
        const onnx::ModelProto model = load_model(model_path);
        for (const auto& node : model.graph().node()) {
            const std::string& domain = node.domain();
            ops.insert(domain.empty() || domain == "ai.onnx" ? node.op_type() : domain + ":" + node.op_type());
        }
    } catch (const std::exception&) {
        // An unreadable model has no operators to count; running it reports the problem.
    }
    return std::vector<std::string>(ops.begin(), ops.end());
}

}  // namespace tessera::onnx_io
