#include "model/functions.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/unknown_field_set.h>

#include "common/status.h"

namespace tessera {

namespace {

// FunctionProto.attribute_proto (IR 9: attributes with default values) is newer than the bundled onnx schema, so it
// arrives as an unknown field.
constexpr int kAttributeProtoField = 11;

struct Function {
    const onnx::FunctionProto* proto;
    std::map<std::string, onnx::AttributeProto> defaults;
};

using FunctionTable = std::map<std::pair<std::string, std::string>, Function>;

std::string normalize(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

class Inliner {
public:
    explicit Inliner(const FunctionTable& functions) : functions_(functions) {}

    void inline_graph(onnx::GraphProto& graph, int depth) {
        if (depth > kMaxDepth) fail(TESS_STATUS_INVALID_MODEL, "model functions nest deeper than {} (recursion?)", kMaxDepth);
        google::protobuf::RepeatedPtrField<onnx::NodeProto> result;
        for (auto& node : *graph.mutable_node()) {
            for (auto& attr : *node.mutable_attribute()) {
                if (attr.has_g()) inline_graph(*attr.mutable_g(), depth);
                for (auto& g : *attr.mutable_graphs()) inline_graph(g, depth);
            }
            auto it = functions_.find({normalize(node.domain()), node.op_type()});
            if (it == functions_.end()) {
                *result.Add() = node;
                continue;
            }
            onnx::GraphProto body;
            expand(node, it->second, body);
            inline_graph(body, depth + 1);
            for (auto& inner : *body.mutable_node()) *result.Add() = std::move(inner);
        }
        graph.mutable_node()->Swap(&result);
    }

private:
    static constexpr int kMaxDepth = 64;

    void expand(const onnx::NodeProto& call, const Function& function, onnx::GraphProto& out) {
        const onnx::FunctionProto& fn = *function.proto;
        std::string who = fmt::format("call of function '{}' by node '{}'", fn.name(), call.name());
        if (call.input_size() > fn.input_size() || call.output_size() > fn.output_size())
            fail(TESS_STATUS_INVALID_MODEL, "{}: {} inputs and {} outputs for a function of {} and {}", who,
                 call.input_size(), call.output_size(), fn.input_size(), fn.output_size());
        std::unordered_map<std::string, std::string> names;  // function-local name -> graph name
        for (int i = 0; i < fn.input_size(); ++i) names[fn.input(i)] = i < call.input_size() ? call.input(i) : "";
        for (int i = 0; i < fn.output_size(); ++i) names[fn.output(i)] = i < call.output_size() ? call.output(i) : "";
        std::string prefix = fmt::format("{}/{}#{}/", call.name().empty() ? fn.name() : call.name(), fn.name(), counter_++);
        auto rename = [&](const std::string& local) -> std::string {
            if (local.empty()) return local;
            auto found = names.find(local);
            if (found != names.end()) return found->second;
            return names[local] = prefix + local;
        };
        std::map<std::string, const onnx::AttributeProto*> bound;
        for (const auto& attr : call.attribute()) bound[attr.name()] = &attr;
        for (const auto& [name, attr] : function.defaults)
            if (!bound.count(name)) bound[name] = &attr;

        for (const auto& inner : fn.node()) {
            onnx::NodeProto* node = out.add_node();
            *node = inner;
            node->set_name(prefix + inner.name());
            for (auto& in : *node->mutable_input()) in = rename(in);
            for (auto& o : *node->mutable_output()) o = rename(o);
            google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
            for (const auto& attr : inner.attribute()) {
                if (!attr.has_ref_attr_name()) {
                    *attrs.Add() = attr;
                    continue;
                }
                auto value = bound.find(attr.ref_attr_name());
                if (value == bound.end()) continue;  // unset optional attribute: the operator's default applies
                onnx::AttributeProto* copy = attrs.Add();
                *copy = *value->second;
                copy->set_name(attr.name());
                copy->clear_ref_attr_name();
            }
            node->mutable_attribute()->Swap(&attrs);
        }
    }

    const FunctionTable& functions_;
    size_t counter_ = 0;
};

}  // namespace

void inline_model_functions(onnx::ModelProto& model) {
    if (model.functions_size() == 0) return;
    FunctionTable functions;
    for (const auto& fn : model.functions()) {
        Function f{&fn, {}};
        const auto& unknown = fn.GetReflection()->GetUnknownFields(fn);
        for (int i = 0; i < unknown.field_count(); ++i) {
            const auto& field = unknown.field(i);
            if (field.number() != kAttributeProtoField ||
                field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
                continue;
            onnx::AttributeProto attr;
            if (!attr.ParseFromString(field.length_delimited()))
                fail(TESS_STATUS_INVALID_MODEL, "function '{}' has a malformed attribute default", fn.name());
            f.defaults[attr.name()] = attr;
        }
        // Inlined nodes run under the model's opset imports, so a function must agree with them.
        for (const auto& opset : fn.opset_import()) {
            const onnx::OperatorSetIdProto* same = nullptr;
            for (const auto& model_opset : model.opset_import())
                if (normalize(model_opset.domain()) == normalize(opset.domain())) same = &model_opset;
            if (same == nullptr) *model.add_opset_import() = opset;
            else if (same->version() != opset.version())
                fail(TESS_STATUS_NOT_IMPLEMENTED,
                     "function '{}' imports opset {} of domain '{}', but the model imports {}", fn.name(),
                     opset.version(), opset.domain(), same->version());
        }
        if (!functions.emplace(std::make_pair(normalize(fn.domain()), fn.name()), std::move(f)).second)
            fail(TESS_STATUS_INVALID_MODEL, "function '{}' of domain '{}' is defined twice", fn.name(), fn.domain());
    }
    Inliner(functions).inline_graph(*model.mutable_graph(), 0);
}

}  // namespace tessera
