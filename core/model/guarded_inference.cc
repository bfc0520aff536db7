#include "model/guarded_inference.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/shape_inference/implementation.h>

#include "model/contrib_schemas.h"

namespace tessera {

namespace {

// Whether an attribute holds a value of the declared type.  Old exporters leave `type` unset (UNDEFINED); then the
// matching field must be present.
bool attribute_matches(const onnx::AttributeProto& attr, onnx::AttributeProto::AttributeType declared) {
    if (attr.type() != onnx::AttributeProto::UNDEFINED) return attr.type() == declared;
    switch (declared) {
        case onnx::AttributeProto::INT: return attr.has_i();
        case onnx::AttributeProto::FLOAT: return attr.has_f();
        case onnx::AttributeProto::STRING: return attr.has_s();
        case onnx::AttributeProto::TENSOR: return attr.has_t();
        case onnx::AttributeProto::GRAPH: return attr.has_g();
        case onnx::AttributeProto::SPARSE_TENSOR: return attr.has_sparse_tensor();
        case onnx::AttributeProto::TYPE_PROTO: return attr.has_tp();
        default: return true;  // repeated fields: an empty list is a valid value
    }
}

// The rank of input `index` when its shape is known, else -1.
int rank_of(const onnx::InferenceContext& ctx, size_t index) {
    if (index >= ctx.getNumInputs()) return -1;
    const onnx::TypeProto* type = ctx.getInputType(index);
    if (type == nullptr || !type->has_tensor_type() || !type->tensor_type().has_shape()) return -1;
    return type->tensor_type().shape().dim_size();
}

// Convolution and pooling (onnx's convPoolShapeInference and its relatives) index the data's spatial dimensions
// with lengths taken from the weights or the attributes; they must agree with the data's rank.
void check_conv_pool(const onnx::OpSchema& schema, onnx::InferenceContext& ctx) {
    const std::string& op = schema.Name();
    size_t data = 0, weights = SIZE_MAX;
    if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose" || op == "DeformConv") weights = 1;
    else if (op == "QLinearConv") weights = 3;
    else if (op == "MaxUnpool") weights = 1;  // the indices, shaped like the data
    else if (op != "AveragePool" && op != "MaxPool" && op != "LpPool" && op != "MaxRoundingPool") return;
    const int rank = rank_of(ctx, data);
    if (rank < 0) return;
    if (rank < 2) fail_shape_inference(op, ": the data has rank ", rank, ", at least 2 is needed");
    const int weight_rank = weights == SIZE_MAX ? -1 : rank_of(ctx, weights);
    if (weight_rank >= 0 && weight_rank != rank)
        fail_shape_inference(op, ": the data has rank ", rank, " but input ", weights, " has rank ", weight_rank);
    const size_t spatial = static_cast<size_t>(rank - 2);
    for (const char* name : {"kernel_shape", "strides", "dilations", "output_padding", "output_shape"}) {
        const onnx::AttributeProto* attr = ctx.getAttribute(name);
        if (attr != nullptr && static_cast<size_t>(attr->ints_size()) != spatial)
            fail_shape_inference(op, ": attribute ", name, " has ", attr->ints_size(), " values for ", spatial,
                                 " spatial dimensions");
    }
    const onnx::AttributeProto* pads = ctx.getAttribute("pads");
    if (pads != nullptr && static_cast<size_t>(pads->ints_size()) != 2 * spatial)
        fail_shape_inference(op, ": attribute pads has ", pads->ints_size(), " values for ", spatial,
                             " spatial dimensions");
}

// What onnx's checker (OpSchema::Verify) would have refused, checked on the inference context.
void check_node(const onnx::OpSchema& schema, onnx::InferenceContext& ctx) {
    const auto inputs = static_cast<int>(ctx.getNumInputs());
    const auto outputs = static_cast<int>(ctx.getNumOutputs());
    if (inputs < schema.min_input() || inputs > schema.max_input())
        fail_shape_inference(schema.Name(), " has ", inputs, " inputs; it takes ", schema.min_input(), " to ",
                             schema.max_input());
    if (outputs < schema.min_output() || outputs > schema.max_output())
        fail_shape_inference(schema.Name(), " has ", outputs, " outputs; it gives ", schema.min_output(), " to ",
                             schema.max_output());
    for (const auto& [name, declared] : schema.attributes()) {
        const onnx::AttributeProto* attr = ctx.getAttribute(name);
        if (attr == nullptr) {
            if (declared.required) fail_shape_inference(schema.Name(), ": required attribute ", name, " is missing");
            continue;
        }
        if (!attribute_matches(*attr, declared.type))
            fail_shape_inference(schema.Name(), ": attribute ", name, " has the wrong type");
    }
    check_conv_pool(schema, ctx);
}

// The standard registry, handing out copies of its schemas whose inference functions run check_node first.  The
// copies are made once per schema and kept for the life of the process (schemas are static in libonnx too).
class GuardedRegistry final : public onnx::ISchemaRegistry {
public:
    const onnx::OpSchema* GetSchema(const std::string& key, const int max_version,
                                    const std::string& domain) const override {
        const onnx::OpSchema* original = onnx::OpSchemaRegistry::Schema(key, max_version, domain);
        if (original == nullptr && domain == "com.microsoft") original = contrib_schema(key, max_version);
        // Without an inference function libonnx infers through the schema's function body, whose nodes come back
        // here one by one; leaving such a schema as it is keeps that path.
        if (original == nullptr || !original->has_type_and_shape_inference_function()) return original;
        std::lock_guard lock(mutex_);
        auto& guarded = guarded_[original];
        if (!guarded) {
            guarded = std::make_unique<onnx::OpSchema>(*original);
            onnx::InferenceFunction infer = original->GetTypeAndShapeInferenceFunction();
            const onnx::OpSchema* schema = original;
            guarded->TypeAndShapeInferenceFunction([infer, schema](onnx::InferenceContext& ctx) {
                check_node(*schema, ctx);
                infer(ctx);
            });
        }
        return guarded.get();
    }

private:
    mutable std::mutex mutex_;
    mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> guarded_;
};

}  // namespace

void infer_shapes_guarded(onnx::ModelProto& model) {
    static const GuardedRegistry registry;
    try {
        onnx::shape_inference::InferShapes(model, &registry, onnx::ShapeInferenceOptions(false, 0, false));
    } catch (const std::exception&) {
        // Inference is only a hint; the model is validated by our own checks and run-time shapes are authoritative.
    }
}

}  // namespace tessera
