#include "model/guarded_inference.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

// libonnx infers nothing at all in a model importing a default-domain opset newer than it knows (Debian's 1.12:
// opset 17), so that every fusion needing shapes would pass over such models.  Up to the newest opset whose changes
// were surveyed, these operators changed after 17 only by the element types they accept, by attributes or inputs
// added (which a node of the older schema lacks: a node carrying one is left uninferred, and check_node refuses an
// input count the older schema does not take), or by attribute values that do not change an output's shape (Pad's
// modes, Resize's coordinate transforms, ScatterND's reductions): for their nodes the older schema's inference
// gives the newer one's types and shapes (DequantizeLinear with a float32 scale: its output takes the scale's type
// from 19 on).  Any other node of the default domain is left uninferred.
constexpr int64_t kNewestSurveyedOpset = 27;  // onnx 1.22
const std::set<std::string>& stable_operators() {
    static const std::set<std::string> ops{
        "Abs", "Add", "And", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip",
        "Concat", "Constant", "Conv", "ConvInteger", "ConvTranspose", "Cos", "CumSum", "DepthToSpace",
        "DequantizeLinear", "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Elu", "Equal", "Erf", "Exp",
        "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gemm", "GlobalAveragePool",
        "GlobalMaxPool", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization",
        "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LpNormalization", "MatMul", "MatMulInteger",
        "Max", "MaxPool", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or", "PRelu", "Pad", "Pow", "QLinearConv",
        "QLinearMatMul", "QuantizeLinear", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum",
        "Relu", "Reshape", "Resize", "Round", "ScatterND", "Selu", "Shape", "Sigmoid", "Sin", "Size", "Slice",
        "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh",
        "Tile", "Transpose", "Unsqueeze", "Where", "Xor"};
    return ops;
}

bool default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// Whether libonnx's schema of `node` at `version` declares every attribute the node carries (and none holds a
// graph: subgraphs are not inferred this way).
bool attributes_declared(const onnx::NodeProto& node, int version) {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), version, "");
    if (schema == nullptr) return false;
    for (const auto& attr : node.attribute())
        if (schema->attributes().count(attr.name()) == 0 || attr.type() == onnx::AttributeProto::GRAPH ||
            attr.type() == onnx::AttributeProto::GRAPHS)
            return false;
    return true;
}

void infer(onnx::ModelProto& model) {
    static const GuardedRegistry registry;
    try {
        onnx::shape_inference::InferShapes(model, &registry, onnx::ShapeInferenceOptions(false, 0, false));
    } catch (const std::exception&) {
        // Inference is only a hint; the model is validated by our own checks and run-time shapes are authoritative.
    }
}

}  // namespace

void infer_shapes_guarded(onnx::ModelProto& model) {
    const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    const auto known = ranges.find("");
    onnx::OperatorSetIdProto* import = nullptr;
    for (auto& opset : *model.mutable_opset_import())
        if (default_domain(opset.domain())) import = &opset;
    if (import == nullptr || known == ranges.end() || import->version() <= known->second.second) {
        infer(model);
        return;
    }
    // Beyond the survey libonnx would apply older definitions blindly: no inference.
    if (import->version() > kNewestSurveyedOpset) return;
    // The model's import lowered to the newest opset libonnx knows for the inference, and every node whose type
    // and shape that opset's schema might give wrongly renamed to an operator nobody defines (which libonnx leaves
    // uninferred); both restored afterwards.
    const int64_t imported = import->version();
    const int newest = known->second.second;
    std::vector<std::pair<onnx::NodeProto*, std::string>> renamed;
    // DequantizeLinear's output follows its scale's type from opset 19 on (float32 only before): kept only for a
    // float32 initializer scale.
    std::set<std::string> float_initializers;
    for (const auto& init : model.graph().initializer())
        if (init.data_type() == onnx::TensorProto::FLOAT) float_initializers.insert(init.name());
    auto older_definition_holds = [&](const onnx::NodeProto& node) {
        if (!stable_operators().count(node.op_type()) || !attributes_declared(node, newest)) return false;
        return node.op_type() != "DequantizeLinear" ||
               (node.input_size() > 1 && float_initializers.count(node.input(1)) > 0);
    };
    for (auto& node : *model.mutable_graph()->mutable_node()) {
        if (!default_domain(node.domain()) || older_definition_holds(node)) continue;
        renamed.emplace_back(&node, node.op_type());
        node.set_op_type("tessera.uninferred." + node.op_type());
    }
    import->set_version(newest);
    infer(model);
    import->set_version(imported);
    for (auto& [node, op_type] : renamed) node->set_op_type(op_type);
}

}  // namespace tessera
