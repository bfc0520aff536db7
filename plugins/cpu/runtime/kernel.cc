#include "runtime/kernel.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "runtime/host.h"

namespace tessera::cpu {

int64_t shape_size(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t checked_byte_size(int32_t type, const Shape& shape, std::string_view what) {
    if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
        throw KernelError(std::string(what) + ": negative dimension in the shape " + shape_string(shape));
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
    uint64_t count = 1;
    bool overflow = false;
    for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count);
    // Up to 16 bytes an element (complex128): the byte count must fit too.
    if (overflow || count > (std::numeric_limits<uint64_t>::max() >> 5))
        throw KernelError(std::string(what) + ": a tensor of shape " + shape_string(shape) +
                          " has more elements than memory can hold");
    return element_bytes(type, static_cast<size_t>(count));
}

std::string shape_string(const Shape& shape) {
    std::ostringstream out;
    out << '[';
    for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
    out << ']';
    return out.str();
}

size_t Tensor::byte_size() const { return element_bytes(type, static_cast<size_t>(size())); }

void throw_unsupported_type(std::string_view what, int32_t type) {
    throw KernelError(std::string(what) + ": unsupported element type " + element_type_name(type));
}

// ---- NodeInfo ----

int32_t NodeInfo::input_type(size_t i) const {
    return has_input(i) ? node_.inputs[i]->element_type : TESS_ELEMENT_UNDEFINED;
}

int32_t NodeInfo::output_type(size_t i) const {
    return has_output(i) ? node_.outputs[i]->element_type : TESS_ELEMENT_UNDEFINED;
}

std::optional<Shape> NodeInfo::input_shape(size_t i) const {
    if (!has_input(i) || node_.inputs[i]->rank < 0) return std::nullopt;
    const TessValueView* v = node_.inputs[i];
    Shape shape(v->dims, v->dims + v->rank);
    if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
    return shape;
}

const TessValue* NodeInfo::input_constant(size_t i) const { return has_input(i) ? node_.inputs[i]->constant : nullptr; }

std::optional<Tensor> NodeInfo::constant_tensor(size_t i) const {
    const TessValue* v = input_constant(i);
    if (v == nullptr || host().value_kind(v) != TESS_VALUE_TENSOR) return std::nullopt;
    return tensor_of(v);
}

const TessAttributeView* NodeInfo::find(std::string_view name) const {
    for (size_t i = 0; i < node_.attribute_count; ++i)
        if (name == node_.attributes[i]->name) return node_.attributes[i];
    return nullptr;
}

namespace {

[[noreturn]] void bad_attr(const NodeInfo& node, std::string_view name, std::string_view problem) {
    throw KernelError(std::string(node.op_type()) + " attribute '" + std::string(name) + "' " + std::string(problem));
}

}  // namespace

int64_t NodeInfo::attr_int(std::string_view name, int64_t fallback) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return fallback;
    if (a->type != TESS_ATTR_INT) bad_attr(*this, name, "is not an int");
    return a->i;
}

int64_t NodeInfo::attr_int(std::string_view name) const {
    if (find(name) == nullptr) bad_attr(*this, name, "is required");
    return attr_int(name, 0);
}

float NodeInfo::attr_float(std::string_view name, float fallback) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return fallback;
    if (a->type == TESS_ATTR_INT) return static_cast<float>(a->i);
    if (a->type != TESS_ATTR_FLOAT) bad_attr(*this, name, "is not a float");
    return a->f;
}

std::string NodeInfo::attr_string(std::string_view name, std::string_view fallback) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return std::string(fallback);
    if (a->type != TESS_ATTR_STRING) bad_attr(*this, name, "is not a string");
    return std::string(a->s, a->s_len);
}

std::vector<int64_t> NodeInfo::attr_ints(std::string_view name, std::vector<int64_t> fallback) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return fallback;
    if (a->type == TESS_ATTR_INT) return {a->i};
    if (a->type != TESS_ATTR_INTS) bad_attr(*this, name, "is not a list of ints");
    return std::vector<int64_t>(a->ints, a->ints + a->count);
}

std::vector<float> NodeInfo::attr_floats(std::string_view name, std::vector<float> fallback) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return fallback;
    if (a->type == TESS_ATTR_FLOAT) return {a->f};
    if (a->type != TESS_ATTR_FLOATS) bad_attr(*this, name, "is not a list of floats");
    return std::vector<float>(a->floats, a->floats + a->count);
}

std::vector<std::string> NodeInfo::attr_strings(std::string_view name) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return {};
    if (a->type == TESS_ATTR_STRING) return {std::string(a->s, a->s_len)};
    if (a->type != TESS_ATTR_STRINGS) bad_attr(*this, name, "is not a list of strings");
    std::vector<std::string> result;
    for (size_t i = 0; i < a->count; ++i) result.emplace_back(a->strings[i], a->string_lens[i]);
    return result;
}

const TessValue* NodeInfo::attr_tensor(std::string_view name) const {
    const TessAttributeView* a = find(name);
    if (a == nullptr) return nullptr;
    if (a->type != TESS_ATTR_TENSOR) bad_attr(*this, name, "is not a tensor");
    return a->tensor;
}

// ---- Registry ----

std::string KernelRegistry::key(std::string_view domain, std::string_view op_type) {
    std::string k(domain);
    k += '\0';
    k += op_type;
    return k;
}

void KernelRegistry::add(KernelDef def) {
    by_op_[key(def.domain, def.op_type)].push_back(defs_.size());
    defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::find(const TessNodeView& node, std::string* why) const {
    std::string_view domain = node.domain;
    std::string_view op = node.op_type;
    const KernelDef* best = nullptr;
    std::string type_problem;
    static const std::vector<size_t> kNone;
    const auto found = by_op_.find(key(domain, op));
    const bool op_known = found != by_op_.end();
    for (size_t i : op_known ? found->second : kNone) {
        const KernelDef& def = defs_[i];
        if (node.opset < def.since_version || (def.end_version != 0 && node.opset > def.end_version)) continue;
        bool types_ok = true;
        for (const auto& [index, allowed] : def.input_types) {
            if (allowed.empty() || index >= node.input_count || node.inputs[index] == nullptr) continue;
            int32_t t = node.inputs[index]->element_type;
            if (t == TESS_ELEMENT_UNDEFINED) continue;
            if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
                types_ok = false;
                type_problem = std::string("input ") + std::to_string(index) + " type " + element_type_name(t) +
                               " is not supported";
            }
        }
        if (!types_ok) continue;
        if (best == nullptr || def.since_version > best->since_version) best = &def;
    }
    const std::string name = (domain.empty() ? "" : std::string(domain) + ":") + std::string(op);
    if (best != nullptr && best->check) {
        std::string problem;
        try {
            problem = best->check(NodeInfo(node));
        } catch (const KernelError& e) {
            problem = e.what();
        }
        if (!problem.empty()) {
            if (why != nullptr) *why = name + ": " + problem;
            return nullptr;
        }
    }
    if (best == nullptr && why != nullptr) {
        if (!op_known) *why = "no CPU kernel for " + name;
        else if (!type_problem.empty()) *why = name + " opset " + std::to_string(node.opset) + ": " + type_problem;
        else *why = "no CPU kernel for " + name + " at opset " + std::to_string(node.opset);
    }
    return best;
}

}  // namespace tessera::cpu
