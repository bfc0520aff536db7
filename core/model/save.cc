#include "model/save.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "common/status.h"
#include "tessera/tessera.h"

namespace tessera {

namespace fs = std::filesystem;
using google::protobuf::io::CodedOutputStream;

namespace {

constexpr int64_t kMinSavedIrVersion = 7;  // from IR 4 on, initializers need not be listed among the graph inputs

// Wire format of a length-delimited field (submessages, bytes): its tag.
constexpr uint32_t length_delimited_tag(int field) { return (static_cast<uint32_t>(field) << 3) | 2u; }

size_t length_delimited_size(int field, size_t payload) {
    return CodedOutputStream::VarintSize32(length_delimited_tag(field)) + CodedOutputStream::VarintSize64(payload) +
           payload;
}

// One initializer as it is written: its TensorProto without the data bytes (`meta`), followed on the wire by a
// raw_data field holding the value's bytes when the data stays inline.
struct Initializer {
    const TessValue* value = nullptr;
    onnx::TensorProto meta;
    size_t raw_bytes = 0;     // bytes of the tensor's data (0 for strings)
    bool has_raw = false;     // raw_data follows meta (inline, non-string)
    bool external = false;
    uint64_t offset = 0;      // in the external data file

    size_t size() const {
        size_t n = meta.ByteSizeLong();
        if (has_raw) n += length_delimited_size(onnx::TensorProto::kRawDataFieldNumber, raw_bytes);
        return n;
    }
};

void set_external(Initializer& init, const std::string& location, uint64_t offset) {
    init.external = true;
    init.has_raw = false;
    init.offset = offset;
    init.meta.set_data_location(onnx::TensorProto::EXTERNAL);
    init.meta.clear_external_data();
    auto add = [&](const char* key, const std::string& value) {
        auto* entry = init.meta.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(init.raw_bytes));
}

Initializer make_initializer(const std::string& name, const TessValue& value) {
    if (value.kind != TESS_VALUE_TENSOR)
        fail(TESS_STATUS_NOT_IMPLEMENTED, "initializer '{}' is not a tensor and cannot be saved", name);
    if (!value.is_host())
        fail(TESS_STATUS_INTERNAL, "initializer '{}' is not in host memory and cannot be saved", name);
    Initializer init;
    init.value = &value;
    init.meta.set_name(name);
    for (int64_t d : value.dims) init.meta.add_dims(d);
    init.meta.set_data_type(value.element_type);
    if (value.element_type == TESS_ELEMENT_STRING) {
        for (const auto& s : value.strings) init.meta.add_string_data(s);
        return init;
    }
    init.raw_bytes = storage_bytes(value.element_type, value.element_count());
    if (init.raw_bytes > 0 && (value.data == nullptr || value.byte_size < init.raw_bytes))
        fail(TESS_STATUS_INTERNAL, "initializer '{}' holds {} bytes but its shape needs {}", name, value.byte_size,
             init.raw_bytes);
    init.has_raw = true;
    return init;
}

void add_value_info(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& list, const Graph& graph,
                    const std::string& name) {
    onnx::ValueInfoProto* info = list.Add();
    info->set_name(name);
    auto it = graph.types.find(name);
    if (it != graph.types.end()) {
        onnx::TypeProto type;
        if (type_to_proto(it->second, type)) *info->mutable_type() = std::move(type);
    }
}

// Everything but the initializers.
onnx::GraphProto graph_without_initializers(const Graph& graph) {
    onnx::GraphProto g;
    g.set_name(graph.name.empty() ? "tessera_optimized" : graph.name);
    for (const Node& node : graph.nodes) {
        onnx::NodeProto* proto = g.add_node();
        if (!node.name.empty()) proto->set_name(node.name);
        proto->set_op_type(node.op_type);
        if (!node.domain.empty()) proto->set_domain(node.domain);
        for (const auto& in : node.inputs) proto->add_input(in);
        for (const auto& out : node.outputs) proto->add_output(out);
        for (const auto& attr : node.attributes) *proto->add_attribute() = attr;
    }
    for (const auto& in : graph.inputs) add_value_info(*g.mutable_input(), graph, in);
    for (const auto& out : graph.outputs) add_value_info(*g.mutable_output(), graph, out);
    // Intermediate values: every node output with a type that is neither a graph output nor a constant.
    std::unordered_set<std::string> listed(graph.outputs.begin(), graph.outputs.end());
    listed.insert(graph.inputs.begin(), graph.inputs.end());
    for (const Node& node : graph.nodes)
        for (const auto& out : node.outputs) {
            if (out.empty() || graph.initializers.count(out) || !listed.insert(out).second) continue;
            auto it = graph.types.find(out);
            onnx::TypeProto type;
            if (it == graph.types.end() || !type_to_proto(it->second, type)) continue;
            onnx::ValueInfoProto* info = g.add_value_info();
            info->set_name(out);
            *info->mutable_type() = std::move(type);
        }
    return g;
}

// A file written through protobuf's FileOutputStream; errors name the path and the system's reason.  A file that
// was not closed successfully is removed.
class OutputFile {
public:
    OutputFile(fs::path path, const char* what) : path_(std::move(path)), what_(what) {
        const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) fail_errno(errno);
        stream_.emplace(fd);
        stream_->SetCloseOnDelete(true);
        coded_.emplace(&*stream_);
    }
    ~OutputFile() {
        if (closed_) return;
        coded_.reset();
        stream_.reset();  // closes the descriptor
        std::error_code ec;
        fs::remove(path_, ec);
    }
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    CodedOutputStream& coded() { return *coded_; }

    void write_raw(const void* data, size_t bytes) {
        const auto* p = static_cast<const char*>(data);
        constexpr size_t kChunk = size_t{1} << 30;  // WriteRaw takes an int
        while (bytes > 0) {
            const size_t n = std::min(bytes, kChunk);
            coded_->WriteRaw(p, static_cast<int>(n));
            p += n;
            bytes -= n;
        }
    }

    // Flushes and closes the file; throws (and the destructor removes the file) when that fails.
    void close() {
        const bool coded_error = coded_->HadError();
        coded_.reset();
        stream_->SetCloseOnDelete(false);      // closed here, once (a second close is a protobuf CHECK failure)
        const bool closed = stream_->Close();  // the descriptor is closed even when this fails
        const int error = stream_->GetErrno();
        if (coded_error || !closed) fail_errno(error != 0 ? error : EIO);
        stream_.reset();
        closed_ = true;
    }

    const fs::path& path() const { return path_; }

private:
    [[noreturn]] void fail_errno(int error) {
        fail(TESS_STATUS_RUNTIME_ERROR, "cannot write the {} '{}': {}", what_, path_.string(), std::strerror(error));
    }

    fs::path path_;
    const char* what_;
    bool closed_ = false;
    std::optional<google::protobuf::io::FileOutputStream> stream_;
    std::optional<CodedOutputStream> coded_;
};

}  // namespace

bool type_to_proto(const TypeInfo& type, onnx::TypeProto& out) {
    out.Clear();
    if (type.element_type == TESS_ELEMENT_UNDEFINED) return false;
    if (type.kind == TESS_VALUE_TENSOR) {
        auto* tensor = out.mutable_tensor_type();
        tensor->set_elem_type(type.element_type);
        if (type.has_shape) {
            auto* shape = tensor->mutable_shape();
            for (size_t d = 0; d < type.dims.size(); ++d) {
                auto* dim = shape->add_dim();
                if (type.dims[d] >= 0) dim->set_dim_value(type.dims[d]);
                else if (d < type.dim_params.size() && !type.dim_params[d].empty()) dim->set_dim_param(type.dim_params[d]);
            }
        }
        return true;
    }
    if (type.kind == TESS_VALUE_SEQUENCE) {
        out.mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(type.element_type);
        return true;
    }
    // An optional's TypeInfo does not say whether it holds a tensor or a sequence; maps keep no key and value types.
    return false;
}

void save_model_file(const Graph& graph, const fs::path& path, const SaveModelOptions& options) {
    // The model without its graph, then the graph without its initializers: both small.
    onnx::ModelProto header;
    header.set_ir_version(std::max(graph.ir_version, kMinSavedIrVersion));
    header.set_producer_name("tessera");
    header.set_producer_version(tess_version());
    for (const auto& [domain, version] : graph.opsets) {
        auto* opset = header.add_opset_import();
        opset->set_domain(domain);
        opset->set_version(version);
    }
    const onnx::GraphProto body = graph_without_initializers(graph);

    // Initializers by name, so that the file does not depend on hash order.
    std::vector<const std::string*> names;
    names.reserve(graph.initializers.size());
    for (const auto& [name, _] : graph.initializers) names.push_back(&name);
    std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
    std::vector<Initializer> inits;
    inits.reserve(names.size());
    for (const std::string* name : names) inits.push_back(make_initializer(*name, *graph.initializers.at(*name)));

    auto graph_size = [&] {
        size_t n = body.ByteSizeLong();
        for (const auto& init : inits) n += length_delimited_size(onnx::GraphProto::kInitializerFieldNumber, init.size());
        return n;
    };
    auto model_size = [&] {
        return header.ByteSizeLong() + length_delimited_size(onnx::ModelProto::kGraphFieldNumber, graph_size());
    };

    // Too large for one protobuf message: the larger initializers go to "<file name>.data", next to the model.
    const std::string data_name = path.filename().string() + ".data";
    const fs::path data_path = path.parent_path() / data_name;
    bool any_external = false;
    if (model_size() > options.max_inline_bytes) {
        uint64_t offset = 0;
        for (auto& init : inits) {
            if (!init.has_raw || init.raw_bytes < options.external_min_bytes) continue;
            const uint64_t align = init.raw_bytes >= (1u << 20) ? 4096 : 64;  // page-aligned for large tensors (mmap)
            offset = (offset + align - 1) / align * align;
            set_external(init, data_name, offset);
            offset += init.raw_bytes;
            any_external = true;
        }
        const size_t size = model_size();
        if (size > options.max_inline_bytes)
            fail(TESS_STATUS_NOT_IMPLEMENTED,
                 "cannot write the optimized model '{}': it takes {} bytes even with its initializers of {} bytes "
                 "and more stored as external data, more than the {} a model file may hold",
                 path.string(), size, options.external_min_bytes, options.max_inline_bytes);
    }

    if (any_external) {
        OutputFile data_file(data_path, "optimized model's external data");
        static const char kZeros[4096] = {};
        uint64_t at = 0;
        for (const auto& init : inits) {
            if (!init.external) continue;
            data_file.write_raw(kZeros, init.offset - at);
            data_file.write_raw(init.value->data, init.raw_bytes);
            at = init.offset + init.raw_bytes;
        }
        data_file.close();
    }

    try {
        OutputFile model(path, "optimized model");
        CodedOutputStream& out = model.coded();
        header.SerializeToCodedStream(&out);
        out.WriteTag(length_delimited_tag(onnx::ModelProto::kGraphFieldNumber));
        out.WriteVarint64(graph_size());
        body.SerializeToCodedStream(&out);
        for (const auto& init : inits) {
            out.WriteTag(length_delimited_tag(onnx::GraphProto::kInitializerFieldNumber));
            out.WriteVarint64(init.size());
            init.meta.SerializeToCodedStream(&out);
            if (!init.has_raw) continue;
            out.WriteTag(length_delimited_tag(onnx::TensorProto::kRawDataFieldNumber));
            out.WriteVarint64(init.raw_bytes);
            model.write_raw(init.value->data, init.raw_bytes);
        }
        model.close();
    } catch (...) {
        if (any_external) {
            std::error_code ec;
            fs::remove(data_path, ec);  // the data file is useless without its model
        }
        throw;
    }
}

}  // namespace tessera
