#include "model/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/defs/schema.h>

#include "common/status.h"
#include "model/functions.h"
#include "model/guarded_inference.h"
#include "model/tensor_proto.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

std::string normalize_domain(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

// ONNX's shape inference (from libonnx) fills in value types the model leaves out.  It is run only when every
// imported standard opset but the default domain's is one this libonnx knows, because for newer opsets it would
// apply older operator definitions (infer_shapes_guarded takes care of a newer default domain); nodes of custom
// domains are left to their libraries' shape inference.
void infer_types_best_effort(onnx::ModelProto& model) {
    const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    for (const auto& opset : model.opset_import()) {
        if (opset.domain().empty() || opset.domain() == "ai.onnx") continue;
        auto it = known.find(opset.domain());
        if (it == known.end()) continue;  // a custom domain: its nodes are simply not inferred
        if (opset.version() > it->second.second) return;
    }
    infer_shapes_guarded(model);  // errors are swallowed: inference is only a hint
}

// Names reach providers through the plugin ABI as C strings: one holding a NUL byte would arrive as another,
// shorter name (an op type "Relu\0x" as "Relu", two values as one), so such models are refused.
void check_name(const std::string& name, std::string_view kind) {
    const size_t nul = name.find('\0');
    if (nul != std::string::npos)
        fail(TESS_STATUS_INVALID_MODEL, "{} '{}...' contains a NUL byte", kind, name.substr(0, nul));
}

void merge_type(Graph& graph, const onnx::ValueInfoProto& info) {
    if (!info.has_type()) return;
    TypeInfo type = type_from_proto(info.type());
    auto [it, inserted] = graph.types.emplace(info.name(), type);
    if (!inserted) {
        // Keep the more informative one: a declared shape beats none.
        if (it->second.kind == TESS_VALUE_UNKNOWN || (!it->second.has_shape && type.has_shape)) it->second = type;
    }
}

// A tensor attribute (a Constant's value, say) may keep its data in an external file, like an initializer: it is
// read now, under the model's external-data rules, and stored inline, so that nothing later needs the model's
// directory.
void inline_external_tensors(onnx::AttributeProto& attr, const ExternalDataPolicy& policy, const Node& node) {
    auto inline_one = [&](onnx::TensorProto& t) {
        if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
        const ValuePtr value =
            tensor_from_proto(t, policy, fmt::format("attribute '{}' of node {}", attr.name(), node.label()));
        t.clear_external_data();
        t.set_data_location(onnx::TensorProto::DEFAULT);
        t.set_raw_data(value->data, value->byte_size);
    };
    if (attr.type() == onnx::AttributeProto::TENSOR) inline_one(*attr.mutable_t());
    if (attr.type() == onnx::AttributeProto::TENSORS)
        for (auto& t : *attr.mutable_tensors()) inline_one(t);
}

// What a graph being built inherits from the model and from its enclosing graphs.
struct Scope {
    const std::map<std::string, int64_t>* opsets;
    int64_t ir_version;
    const ExternalDataPolicy* policy;
    std::unordered_set<std::string> outer;  // names defined by enclosing graphs
    bool is_subgraph;
};

// `owned`, when given, is `g` itself, which the caller discards afterwards: its initializers' bytes are moved out.
Graph build_graph(const onnx::GraphProto& g, const Scope& scope, onnx::GraphProto* owned = nullptr) {
    Graph graph;
    graph.name = g.name();
    graph.ir_version = scope.ir_version;
    graph.opsets = *scope.opsets;
    graph.outer_scope = scope.outer;

    for (int i = 0; i < g.initializer_size(); ++i) {
        const auto& init = g.initializer(i);
        if (init.name().empty()) fail(TESS_STATUS_INVALID_MODEL, "an initializer has no name");
        check_name(init.name(), "initializer");
        if (graph.initializers.count(init.name()))
            fail(TESS_STATUS_INVALID_MODEL, "initializer '{}' is defined twice", init.name());
        const std::string what = fmt::format("initializer '{}'", init.name());
        graph.initializers[init.name()] = owned != nullptr
                                              ? take_tensor_from_proto(*owned->mutable_initializer(i), *scope.policy, what)
                                              : tensor_from_proto(init, *scope.policy, what);
        TypeInfo type;
        type.kind = TESS_VALUE_TENSOR;
        type.element_type = init.data_type();
        type.has_shape = true;
        type.dims.assign(init.dims().begin(), init.dims().end());
        type.dim_params.assign(type.dims.size(), "");
        graph.types[init.name()] = type;
    }
    if (g.sparse_initializer_size() > 0)
        fail(TESS_STATUS_NOT_IMPLEMENTED, "sparse initializers are not supported (first: '{}')",
             g.sparse_initializer(0).values().name());

    // IR < 4 lists every initializer among the inputs; such inputs are weights, not caller-overridable inputs.
    // A subgraph's inputs are its formal parameters, always supplied by the node that runs it.
    bool initializers_are_constants = scope.ir_version < 4 && !scope.is_subgraph;
    std::unordered_set<std::string> seen_inputs;
    for (const auto& input : g.input()) {
        if (input.name().empty()) fail(TESS_STATUS_INVALID_MODEL, "a graph input has no name");
        check_name(input.name(), "graph input");
        if (!seen_inputs.insert(input.name()).second)
            fail(TESS_STATUS_INVALID_MODEL, "graph input '{}' is listed twice", input.name());
        bool is_initializer = graph.initializers.count(input.name()) != 0;
        if (input.has_type()) graph.types[input.name()] = type_from_proto(input.type());
        if (is_initializer && initializers_are_constants) continue;
        graph.inputs.push_back(input.name());
    }
    for (const auto& info : g.value_info()) merge_type(graph, info);
    for (const auto& output : g.output()) {
        if (output.name().empty()) fail(TESS_STATUS_INVALID_MODEL, "a graph output has no name");
        check_name(output.name(), "graph output");
        merge_type(graph, output);
        graph.outputs.push_back(output.name());
    }

    std::unordered_set<std::string> defined(graph.inputs.begin(), graph.inputs.end());
    for (const auto& [name, _] : graph.initializers) defined.insert(name);
    // Everything a subgraph of this graph may read: the enclosing scopes and every name defined here.
    Scope inner = scope;
    inner.is_subgraph = true;
    inner.outer.insert(defined.begin(), defined.end());
    for (const auto& node : g.node())
        for (const auto& out : node.output())
            if (!out.empty()) inner.outer.insert(out);

    graph.nodes.reserve(static_cast<size_t>(g.node_size()));
    for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& proto = g.node(i);
        Node node;
        node.name = proto.name();
        node.op_type = proto.op_type();
        node.domain = normalize_domain(proto.domain());
        if (node.op_type.empty()) fail(TESS_STATUS_INVALID_MODEL, "node #{} ('{}') has no op_type", i, node.name);
        check_name(node.name, "node name");
        check_name(node.op_type, "op type");
        check_name(node.domain, "domain");
        if (graph.opsets.count(node.domain) == 0)
            fail(TESS_STATUS_INVALID_MODEL, "node {} uses domain '{}', which the model does not import", node.label(),
                 node.domain);
        node.inputs.assign(proto.input().begin(), proto.input().end());
        node.outputs.assign(proto.output().begin(), proto.output().end());
        for (const auto& name : node.inputs) check_name(name, "node input");
        for (const auto& name : node.outputs) check_name(name, "node output");
        for (const auto& out : node.outputs) {
            if (out.empty()) continue;
            if (!defined.insert(out).second)
                fail(TESS_STATUS_INVALID_MODEL, "node {} writes '{}', which is already defined elsewhere", node.label(),
                     out);
        }
        std::unordered_set<std::string> attr_names;
        std::unordered_set<std::string> implicit;
        for (const auto& attr : proto.attribute()) {
            if (attr.name().empty()) fail(TESS_STATUS_INVALID_MODEL, "node {} has an attribute without a name", node.label());
            check_name(attr.name(), "attribute");
            if (!attr_names.insert(attr.name()).second)
                fail(TESS_STATUS_INVALID_MODEL, "node {} has attribute '{}' twice", node.label(), attr.name());
            std::vector<const onnx::GraphProto*> bodies;
            if (attr.type() == onnx::AttributeProto::GRAPH) bodies.push_back(&attr.g());
            if (attr.type() == onnx::AttributeProto::GRAPHS)
                for (const auto& body : attr.graphs()) bodies.push_back(&body);
            for (const onnx::GraphProto* body : bodies) {
                std::shared_ptr<Graph> sub;
                try {
                    sub = std::make_shared<Graph>(build_graph(*body, inner));
                } catch (const Error& e) {
                    throw Error(e.code(), fmt::format("in subgraph '{}' of node {}: {}", attr.name(), node.label(),
                                                      e.what()));
                }
                for (const auto& name : sub->free_values())
                    if (implicit.insert(name).second) node.implicit_inputs.push_back(name);
                node.subgraphs.emplace_back(attr.name(), std::move(sub));
            }
            node.attributes.push_back(attr);
            inline_external_tensors(node.attributes.back(), *scope.policy, node);
        }
        graph.nodes.push_back(std::move(node));
    }
    graph.sort_topologically();
    for (const auto& out : graph.outputs)
        if (defined.count(out) == 0 && !scope.outer.count(out))
            fail(TESS_STATUS_INVALID_MODEL, "graph output '{}' is not produced by any node, input or initializer", out);
    return graph;
}

Graph build_model_graph(onnx::ModelProto& model, const ExternalDataPolicy& policy) {
    std::map<std::string, int64_t> opsets;
    for (const auto& opset : model.opset_import()) {
        if (opset.version() < 1)
            fail(TESS_STATUS_INVALID_MODEL, "opset import for domain '{}' has invalid version {}", opset.domain(),
                 opset.version());
        opsets[normalize_domain(opset.domain())] = opset.version();
    }
    if (opsets.empty()) fail(TESS_STATUS_INVALID_MODEL, "the model imports no opset");
    Scope scope{&opsets, model.ir_version(), &policy, {}, false};
    return build_graph(model.graph(), scope, model.mutable_graph());
}

LoadedModel load(onnx::ModelProto& model, std::optional<fs::path> base_dir) {
    if (!model.has_ir_version())
        fail(TESS_STATUS_INVALID_MODEL, "the model has no ir_version");
    if (model.ir_version() < kMinIrVersion || model.ir_version() > kMaxIrVersion)
        fail(TESS_STATUS_INVALID_MODEL, "IR version {} is not supported (Tessera reads IR {} to {})",
             model.ir_version(), kMinIrVersion, kMaxIrVersion);
    if (!model.has_graph()) fail(TESS_STATUS_INVALID_MODEL, "the model has no graph");
    inline_model_functions(model);
    infer_types_best_effort(model);
    LoadedModel loaded;
    loaded.ir_version = model.ir_version();
    loaded.producer = model.producer_name();
    ModelMetadata& meta = loaded.metadata;
    meta.producer_name = model.producer_name();
    meta.producer_version = model.producer_version();
    meta.domain = model.domain();
    meta.description = model.doc_string();
    meta.graph_name = model.graph().name();
    meta.graph_description = model.graph().doc_string();
    meta.model_version = model.model_version();
    for (const auto& prop : model.metadata_props()) meta.custom.emplace_back(prop.key(), prop.value());
    ExternalDataPolicy policy{std::move(base_dir)};
    loaded.graph = build_model_graph(model, policy);
    return loaded;
}

}  // namespace

TypeInfo type_from_proto(const onnx::TypeProto& type) {
    TypeInfo info;
    const onnx::TypeProto* tensor = nullptr;
    if (type.has_tensor_type()) {
        info.kind = TESS_VALUE_TENSOR;
        tensor = &type;
    } else if (type.has_sequence_type()) {
        info.kind = TESS_VALUE_SEQUENCE;
        if (type.sequence_type().elem_type().has_tensor_type()) tensor = &type.sequence_type().elem_type();
    } else if (type.has_optional_type()) {
        info.kind = TESS_VALUE_OPTIONAL;
        const auto& elem = type.optional_type().elem_type();
        if (elem.has_tensor_type()) tensor = &elem;
        else if (elem.has_sequence_type() && elem.sequence_type().elem_type().has_tensor_type())
            tensor = &elem.sequence_type().elem_type();
    } else if (type.has_map_type()) {
        info.kind = TESS_VALUE_MAP;
    } else if (type.has_sparse_tensor_type()) {
        info.kind = TESS_VALUE_UNKNOWN;
    }
    if (tensor != nullptr) {
        const auto& t = tensor->tensor_type();
        info.element_type = t.elem_type();
        if (t.has_shape() && info.kind == TESS_VALUE_TENSOR) {
            info.has_shape = true;
            for (const auto& dim : t.shape().dim()) {
                info.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
                info.dim_params.push_back(dim.has_dim_param() ? dim.dim_param() : "");
            }
        }
    }
    return info;
}

LoadedModel load_model_bytes(const void* data, size_t size, std::optional<fs::path> base_dir) {
    if (data == nullptr || size == 0) fail(TESS_STATUS_INVALID_ARGUMENT, "the model is empty");
    if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
        fail(TESS_STATUS_INVALID_MODEL, "the model is larger than 2 GiB; store its weights as external data");
    onnx::ModelProto model;
    if (!model.ParseFromArray(data, static_cast<int>(size)))
        fail(TESS_STATUS_INVALID_MODEL, "not a valid ONNX model (the protobuf does not parse)");
    return load(model, std::move(base_dir));
}

LoadedModel load_model_file(const fs::path& path) {
    fs::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    // O_NONBLOCK: opening a FIFO must not wait for a writer.  The type is checked on the opened descriptor, so the
    // file cannot be swapped between the check and the read.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int error = errno;
        if (error == ENOENT) fail(TESS_STATUS_NOT_FOUND, "model file '{}' not found", path.string());
        fail(TESS_STATUS_INVALID_ARGUMENT, "cannot open model file '{}': {}", path.string(), std::strerror(error));
    }
    google::protobuf::io::FileInputStream stream(fd);
    stream.SetCloseOnDelete(true);
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode))
        fail(TESS_STATUS_INVALID_ARGUMENT, "model file '{}' {}", path.string(),
             S_ISDIR(info.st_mode) ? "is a directory" : "is not a regular file");
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    try {
        // Parsed straight from the file, so that the model's bytes are not held twice (file image and message).
        if (info.st_size == 0) fail(TESS_STATUS_INVALID_ARGUMENT, "the model is empty");
        if (info.st_size > std::numeric_limits<int>::max())
            fail(TESS_STATUS_INVALID_MODEL, "the model is larger than 2 GiB; store its weights as external data");
        onnx::ModelProto model;
        {
            google::protobuf::io::CodedInputStream coded(&stream);
            coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
            if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
                fail(TESS_STATUS_INVALID_MODEL, "not a valid ONNX model (the protobuf does not parse)");
        }
        return load(model, dir);
    } catch (const Error& e) {
        throw Error(e.code(), fmt::format("{}: {}", path.filename().string(), e.what()));
    }
}

}  // namespace tessera
