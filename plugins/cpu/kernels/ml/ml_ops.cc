// CPU provider: the classical machine-learning operators of the ai.onnx.ml domain: LabelEncoder, TreeEnsemble,
// Binarizer, ArrayFeatureExtractor, Scaler, Normalizer, OneHotEncoder, Imputer and FeatureVectorizer.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/compute_cast.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/select_slices.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

constexpr const char* kMlDomain = "ai.onnx.ml";

// The elements of a numeric tensor attribute as doubles (empty when the attribute is absent).
std::vector<double> tensor_attr_doubles(const NodeInfo& info, std::string_view name) {
    const TessValue* value = info.attr_tensor(name);
    if (value == nullptr) return {};
    const Tensor t = tensor_of(value);
    if (t.type == TESS_ELEMENT_STRING)
        throw KernelError(std::string(info.op_type()) + ": attribute '" + std::string(name) + "' must be numeric");
    std::vector<double> result(static_cast<size_t>(t.size()));
    convert::load_doubles(t.type, t.data, 0, t.size(), result.data());
    return result;
}

// Index of row `r`'s column `c` for an input seen as [rows, columns] (the last dimension is the feature axis).
struct Matrix {
    int64_t rows = 1, columns = 1;
};
Matrix as_matrix(const Tensor& t) {
    Matrix m;
    m.columns = t.rank() == 0 ? 1 : t.shape.back();
    m.rows = m.columns == 0 ? 0 : t.size() / m.columns;
    return m;
}

// ---- LabelEncoder ------------------------------------------------------------------------------------------------

enum class KeyKind { String, Integer, Real };

KeyKind key_kind_of(int32_t type, std::string_view what) {
    switch (type) {
        case TESS_ELEMENT_STRING:
            return KeyKind::String;
        case TESS_ELEMENT_INT64:
        case TESS_ELEMENT_INT32:
        case TESS_ELEMENT_INT16:
            return KeyKind::Integer;
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_FLOAT64:
            return KeyKind::Real;
        default:
            throw KernelError("LabelEncoder: " + std::string(what) + " has unsupported type " +
                              element_type_name(type));
    }
}

// Float keys match by value, with every NaN matching every NaN (opset 4) and -0 matching 0.
uint64_t real_key(double v) {
    if (std::isnan(v)) return 0x7ff8000000000000ull;
    if (v == 0.0) return 0;
    return std::bit_cast<uint64_t>(v);
}

// One direction of a label mapping: keys of one kind to values of one element type, with a default.
class LabelMapping {
public:
    KeyKind kind = KeyKind::String;
    int32_t value_type = TESS_ELEMENT_UNDEFINED;

    void add_string_key(std::string key) { strings_[std::move(key)] = count_++; }
    void add_integer_key(int64_t key) { integers_[key] = count_++; }
    void add_real_key(double key) { reals_[real_key(key)] = count_++; }
    size_t key_count() const { return count_; }

    // Values: one element of value_type each (the default last), as text or as bytes.
    std::vector<std::string> string_values;
    std::vector<std::byte> value_bytes;

    void apply(KernelContext& ctx, const Tensor& x) const {
        Tensor& y = ctx.output(0, value_type, x.shape);
        const size_t count = size_t(x.size());
        std::vector<size_t> found(count);
        const auto look_up = [this](const auto& map, const auto& key) {
            const auto at = map.find(key);
            return at == map.end() ? count_ : at->second;  // count_: the default value
        };
        if (x.type == TESS_ELEMENT_STRING) {
            for (size_t i = 0; i < count; ++i)
                found[i] = look_up(strings_, std::string(values::get_string(ctx.host(), x.value, i)));
        } else {
            dispatch<int16_t, int32_t, int64_t, float, double>(x.type, [&]<typename T>() {
                const T* data = x.ptr<T>();
                for (size_t i = 0; i < count; ++i)
                    found[i] = std::is_integral_v<T> ? look_up(integers_, int64_t(data[i]))
                                                     : look_up(reals_, real_key(double(data[i])));
            });
        }
        if (value_type == TESS_ELEMENT_STRING) {
            for (size_t i = 0; i < count; ++i) values::set_string(ctx.host(), y.value, i, string_values[found[i]]);
            return;
        }
        const size_t es = element_bytes(value_type, 1);
        auto* out = static_cast<std::byte*>(y.data);
        for (size_t i = 0; i < count; ++i) std::memcpy(out + i * es, value_bytes.data() + found[i] * es, es);
    }

private:
    size_t count_ = 0;
    std::unordered_map<std::string, size_t> strings_;
    std::unordered_map<int64_t, size_t> integers_;
    std::unordered_map<uint64_t, size_t> reals_;
};

template <typename T>
void append_value(std::vector<std::byte>& bytes, T value) {
    const auto* raw = reinterpret_cast<const std::byte*>(&value);
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

// Opset 1 maps strings to their index in classes_strings and back; opsets 2+ map keys_* to values_*, opset 4 adding
// tensor forms of both and default_tensor.
class LabelEncoderKernel final : public Kernel {
public:
    explicit LabelEncoderKernel(const NodeInfo& info) {
        if (info.opset() < 2)
            build_classes(info);
        else
            mappings_.push_back(build_mapping(info));
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const KeyKind kind = key_kind_of(x.type, "the input");
        for (const LabelMapping& mapping : mappings_)
            if (mapping.kind == kind) return mapping.apply(ctx, x);
        throw KernelError(std::string("LabelEncoder: the keys do not have the input's type ") +
                          element_type_name(x.type));
    }

private:
    void build_classes(const NodeInfo& info) {
        const std::vector<std::string> classes = info.attr_strings("classes_strings");
        LabelMapping to_index, to_string;
        to_index.kind = KeyKind::String;
        to_index.value_type = TESS_ELEMENT_INT64;
        to_string.kind = KeyKind::Integer;
        to_string.value_type = TESS_ELEMENT_STRING;
        for (size_t i = 0; i < classes.size(); ++i) {
            to_index.add_string_key(classes[i]);
            append_value(to_index.value_bytes, int64_t(i));
            to_string.add_integer_key(int64_t(i));
            to_string.string_values.push_back(classes[i]);
        }
        append_value(to_index.value_bytes, info.attr_int("default_int64", -1));
        to_string.string_values.push_back(info.attr_string("default_string", "_Unused"));
        mappings_.push_back(std::move(to_index));
        mappings_.push_back(std::move(to_string));
    }

    static LabelMapping build_mapping(const NodeInfo& info) {
        LabelMapping m;
        // Keys.
        if (info.has_attr("keys_strings")) {
            m.kind = KeyKind::String;
            for (std::string& key : info.attr_strings("keys_strings")) m.add_string_key(std::move(key));
        } else if (info.has_attr("keys_int64s")) {
            m.kind = KeyKind::Integer;
            for (int64_t key : info.attr_ints("keys_int64s")) m.add_integer_key(key);
        } else if (info.has_attr("keys_floats")) {
            m.kind = KeyKind::Real;
            for (float key : info.attr_floats("keys_floats")) m.add_real_key(key);
        } else if (const TessValue* keys = info.attr_tensor("keys_tensor")) {
            const Tensor t = tensor_of(keys);
            m.kind = key_kind_of(t.type, "keys_tensor");
            if (m.kind == KeyKind::String) {
                for (int64_t i = 0; i < t.size(); ++i)
                    m.add_string_key(std::string(values::get_string(host(), keys, size_t(i))));
            } else {
                std::vector<double> reals(static_cast<size_t>(t.size()));
                std::vector<int64_t> integers(static_cast<size_t>(t.size()));
                convert::load_doubles(t.type, t.data, 0, t.size(), reals.data());
                convert::load_int64s(t.type, t.data, 0, t.size(), integers.data());
                for (size_t i = 0; i < reals.size(); ++i) {
                    if (m.kind == KeyKind::Real)
                        m.add_real_key(reals[i]);
                    else
                        m.add_integer_key(integers[i]);
                }
            }
        } else {
            throw KernelError("LabelEncoder: no keys_* attribute");
        }

        // Values, then the default that matches them.
        size_t values = 0;
        if (info.has_attr("values_strings")) {
            m.value_type = TESS_ELEMENT_STRING;
            m.string_values = info.attr_strings("values_strings");
            values = m.string_values.size();
            m.string_values.push_back(info.attr_string("default_string", "_Unused"));
        } else if (info.has_attr("values_int64s")) {
            m.value_type = TESS_ELEMENT_INT64;
            const std::vector<int64_t> ints = info.attr_ints("values_int64s");
            for (int64_t v : ints) append_value(m.value_bytes, v);
            values = ints.size();
            append_value(m.value_bytes, info.attr_int("default_int64", -1));
        } else if (info.has_attr("values_floats")) {
            m.value_type = TESS_ELEMENT_FLOAT32;
            const std::vector<float> floats = info.attr_floats("values_floats");
            for (float v : floats) append_value(m.value_bytes, v);
            values = floats.size();
            append_value(m.value_bytes, info.attr_float("default_float", -0.0f));
        } else if (const TessValue* tensor = info.attr_tensor("values_tensor")) {
            const Tensor t = tensor_of(tensor);
            m.value_type = t.type;
            values = size_t(t.size());
            append_tensor_values(m, t);
            if (const TessValue* fallback = info.attr_tensor("default_tensor")) {
                const Tensor d = tensor_of(fallback);
                if (d.type != t.type || d.size() != 1)
                    throw KernelError("LabelEncoder: default_tensor must hold one element of the values' type");
                append_tensor_values(m, d);
            } else if (t.type == TESS_ELEMENT_STRING) {
                m.string_values.emplace_back("_Unused");
            } else {
                // -0.0 for floating-point values, -1 for integers.
                const double fallback_value =
                    (t.type == TESS_ELEMENT_FLOAT32 || t.type == TESS_ELEMENT_FLOAT64) ? -0.0 : -1.0;
                m.value_bytes.resize(m.value_bytes.size() + element_bytes(t.type, 1));
                convert::store_number(t.type, m.value_bytes.data(), int64_t(values), fallback_value);
            }
        } else {
            throw KernelError("LabelEncoder: no values_* attribute");
        }
        if (values != m.key_count())
            throw KernelError("LabelEncoder: " + std::to_string(m.key_count()) + " keys but " + std::to_string(values) +
                              " values");
        if (m.value_type != TESS_ELEMENT_STRING) key_kind_of(m.value_type, "the values");  // checks the type
        return m;
    }

    static void append_tensor_values(LabelMapping& m, const Tensor& t) {
        if (t.type == TESS_ELEMENT_STRING) {
            for (int64_t i = 0; i < t.size(); ++i)
                m.string_values.emplace_back(values::get_string(host(), t.value, size_t(i)));
        } else {
            const auto* raw = static_cast<const std::byte*>(t.data);
            m.value_bytes.insert(m.value_bytes.end(), raw, raw + t.byte_size());
        }
    }

    std::vector<LabelMapping> mappings_;
};

// ---- TreeEnsemble ------------------------------------------------------------------------------------------------

// Tree ensembles (opset 5): interior nodes compare one feature with a threshold or test set membership; leaves add
// a weight to one target; the per-target scores are aggregated over the trees and post-transformed.
class TreeEnsembleKernel final : public Kernel {
public:
    explicit TreeEnsembleKernel(const NodeInfo& info)
        : roots_(info.attr_ints("tree_roots")),
          leaf_targets_(info.attr_ints("leaf_targetids")),
          leaf_weights_(tensor_attr_doubles(info, "leaf_weights")),
          targets_(info.attr_int("n_targets", 1)),
          aggregate_(Aggregate(info.attr_int("aggregate_function", 1))),
          post_transform_(PostTransform(info.attr_int("post_transform", 0))) {
        const std::vector<int64_t> features = info.attr_ints("nodes_featureids");
        const std::vector<double> modes = tensor_attr_doubles(info, "nodes_modes");
        const std::vector<double> splits = tensor_attr_doubles(info, "nodes_splits");
        const std::vector<int64_t> true_ids = info.attr_ints("nodes_truenodeids");
        const std::vector<int64_t> false_ids = info.attr_ints("nodes_falsenodeids");
        const std::vector<int64_t> true_leafs = info.attr_ints("nodes_trueleafs");
        const std::vector<int64_t> false_leafs = info.attr_ints("nodes_falseleafs");
        const std::vector<int64_t> missing_true = info.attr_ints("nodes_missing_value_tracks_true");
        const std::vector<double> members = tensor_attr_doubles(info, "membership_values");
        const size_t count = features.size();
        if (modes.size() != count || splits.size() != count || true_ids.size() != count || false_ids.size() != count ||
            true_leafs.size() != count || false_leafs.size() != count ||
            (!missing_true.empty() && missing_true.size() != count))
            throw KernelError("TreeEnsemble: the nodes_* attributes differ in length");
        if (leaf_targets_.size() != leaf_weights_.size())
            throw KernelError("TreeEnsemble: leaf_targetids and leaf_weights differ in length");
        if (targets_ < 1) throw KernelError("TreeEnsemble: n_targets must be positive");
        for (int64_t target : leaf_targets_)
            if (target < 0 || target >= targets_) throw KernelError("TreeEnsemble: a leaf target is out of range");
        if (int64_t(aggregate_) < 0 || int64_t(aggregate_) > 3)
            throw KernelError("TreeEnsemble: unknown aggregate_function");
        if (int64_t(post_transform_) < 0 || int64_t(post_transform_) > 4)
            throw KernelError("TreeEnsemble: unknown post_transform");

        // Membership sets, NaN-separated, in the order the BRANCH_MEMBER nodes come.
        size_t next_member = 0;
        nodes_.resize(count);
        for (size_t i = 0; i < count; ++i) {
            Node& node = nodes_[i];
            node.mode = Mode(int(modes[i]));
            if (modes[i] < 0 || modes[i] > 6) throw KernelError("TreeEnsemble: unknown node mode");
            node.feature = features[i];
            node.split = splits[i];
            node.missing_true = !missing_true.empty() && missing_true[i] != 0;
            node.true_child = true_ids[i];
            node.false_child = false_ids[i];
            node.true_leaf = true_leafs[i] != 0;
            node.false_leaf = false_leafs[i] != 0;
            if (node.mode == Mode::Member) {
                std::vector<double> set;
                while (next_member < members.size() && !std::isnan(members[next_member]))
                    set.push_back(members[next_member++]);
                if (members.empty()) throw KernelError("TreeEnsemble: a BRANCH_MEMBER node needs membership_values");
                ++next_member;  // the NaN delimiter
                std::sort(set.begin(), set.end());
                node.set = int32_t(sets_.size());
                sets_.push_back(std::move(set));
            }
        }
        validate_trees();
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 2) throw KernelError("TreeEnsemble: X must be [N, F], got " + shape_string(x.shape));
        const int64_t rows = x.shape[0], features = x.shape[1];
        if (max_feature_ >= features)
            throw KernelError("TreeEnsemble: a node reads feature " + std::to_string(max_feature_) + " but X has " +
                              std::to_string(features));
        const ConvertedInput<double> input(x, ctx.pool());
        ConvertedOutput<double> output(ctx.output(0, x.type, {rows, targets_}));
        const double extreme = largest_finite(x.type);
        const double* in = input.data();
        double* out = output.data();
        movement::parallel_range(ctx.pool(), rows, int64_t(nodes_.size() + 1) * 64, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                double* scores = out + r * targets_;
                const double start = aggregate_ == Aggregate::Min   ? extreme
                                     : aggregate_ == Aggregate::Max ? -extreme
                                                                    : 0.0;
                std::fill(scores, scores + targets_, start);
                for (int64_t root : roots_) {
                    const int64_t leaf = find_leaf(root, in + r * features);
                    double& score = scores[leaf_targets_[size_t(leaf)]];
                    const double weight = leaf_weights_[size_t(leaf)];
                    switch (aggregate_) {
                        case Aggregate::Average:
                            score += weight / double(roots_.size());
                            break;
                        case Aggregate::Sum:
                            score += weight;
                            break;
                        case Aggregate::Min:
                            score = std::min(score, weight);
                            break;
                        case Aggregate::Max:
                            score = std::max(score, weight);
                            break;
                    }
                }
                post_transform(scores);
            }
        });
        output.finish(ctx.pool());
    }

private:
    enum class Mode { Leq, Lt, Gte, Gt, Eq, Neq, Member };
    enum class Aggregate { Average, Sum, Min, Max };
    enum class PostTransform { None, Softmax, Logistic, SoftmaxZero, Probit };

    struct Node {
        Mode mode = Mode::Leq;
        bool missing_true = false, true_leaf = false, false_leaf = false;
        int32_t set = -1;
        int64_t feature = 0, true_child = 0, false_child = 0;
        double split = 0;
    };

    // A root whose branches both name the same leaf is that leaf (a one-leaf tree).
    bool is_leaf_tree(int64_t root) const {
        const Node& node = nodes_[size_t(root)];
        return node.true_leaf && node.false_leaf && node.true_child == node.false_child;
    }

    // Checks indices, and that following branches from the roots always ends at a leaf (no cycles), so that
    // find_leaf terminates; records the largest feature read.
    void validate_trees() {
        const int64_t count = int64_t(nodes_.size()), leaves = int64_t(leaf_weights_.size());
        std::vector<uint8_t> state(nodes_.size(), 0);  // 0 unseen, 1 on the current path, 2 done
        const auto check_leaf = [&](int64_t leaf) {
            if (leaf < 0 || leaf >= leaves) throw KernelError("TreeEnsemble: a leaf index is out of range");
        };
        for (int64_t root : roots_) {
            if (root < 0 || root >= count) throw KernelError("TreeEnsemble: a tree root is out of range");
            if (is_leaf_tree(root)) {
                check_leaf(nodes_[size_t(root)].true_child);
                continue;
            }
            if (state[size_t(root)] == 2) continue;
            std::vector<std::pair<int64_t, int>> stack{{root, 0}};  // node, next branch to visit
            state[size_t(root)] = 1;
            while (!stack.empty()) {
                const int64_t index = stack.back().first;
                const int branch = stack.back().second++;
                const Node& node = nodes_[size_t(index)];
                if (branch == 2) {
                    state[size_t(index)] = 2;
                    max_feature_ = std::max(max_feature_, node.feature);
                    if (node.feature < 0) throw KernelError("TreeEnsemble: a feature id is negative");
                    stack.pop_back();
                    continue;
                }
                const bool leaf = branch == 0 ? node.true_leaf : node.false_leaf;
                const int64_t next = branch == 0 ? node.true_child : node.false_child;
                if (leaf) {
                    check_leaf(next);
                    continue;
                }
                if (next < 0 || next >= count) throw KernelError("TreeEnsemble: a node index is out of range");
                if (state[size_t(next)] == 1) throw KernelError("TreeEnsemble: the trees contain a cycle");
                if (state[size_t(next)] == 0) {
                    state[size_t(next)] = 1;
                    stack.emplace_back(next, 0);
                }
            }
        }
    }

    int64_t find_leaf(int64_t root, const double* features) const {
        if (is_leaf_tree(root)) return nodes_[size_t(root)].true_child;
        int64_t index = root;
        while (true) {
            const Node& node = nodes_[size_t(index)];
            const bool go_true = decide(node, features[node.feature]);
            if (go_true ? node.true_leaf : node.false_leaf) return go_true ? node.true_child : node.false_child;
            index = go_true ? node.true_child : node.false_child;
        }
    }

    bool decide(const Node& node, double v) const {
        if (std::isnan(v) && (node.missing_true || node.mode == Mode::Member)) return node.missing_true;
        switch (node.mode) {
            case Mode::Leq:
                return v <= node.split;
            case Mode::Lt:
                return v < node.split;
            case Mode::Gte:
                return v >= node.split;
            case Mode::Gt:
                return v > node.split;
            case Mode::Eq:
                return v == node.split;
            case Mode::Neq:
                return v != node.split;
            case Mode::Member: {
                const auto& set = sets_[size_t(node.set)];
                return std::binary_search(set.begin(), set.end(), v);
            }
        }
        return false;
    }

    void post_transform(double* scores) const {
        const int64_t n = targets_;
        switch (post_transform_) {
            case PostTransform::None:
                return;
            case PostTransform::Logistic:
                for (int64_t t = 0; t < n; ++t) scores[t] = 1.0 / (1.0 + std::exp(-scores[t]));
                return;
            case PostTransform::Softmax:
            case PostTransform::SoftmaxZero: {
                // SOFTMAX_ZERO leaves zero scores at zero and normalizes over the others.
                const bool skip_zeros = post_transform_ == PostTransform::SoftmaxZero;
                const double top = *std::max_element(scores, scores + n);
                double sum = 0;
                for (int64_t t = 0; t < n; ++t) {
                    scores[t] = skip_zeros && scores[t] == 0.0 ? 0.0 : std::exp(scores[t] - top);
                    sum += scores[t];
                }
                if (sum > 0)
                    for (int64_t t = 0; t < n; ++t) scores[t] /= sum;
                return;
            }
            case PostTransform::Probit:
                for (int64_t t = 0; t < n; ++t) scores[t] = std::sqrt(2.0) * inverse_erf(2.0 * scores[t] - 1.0);
                return;
        }
    }

    // erf^-1 on (-1, 1): Giles' approximation refined by two Newton steps (full double accuracy).
    static double inverse_erf(double y) {
        if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? INFINITY : y == -1.0 ? -INFINITY : NAN;
        double w = -std::log((1.0 - y) * (1.0 + y)), x;
        if (w < 5.0) {
            w -= 2.5;
            x = 2.81022636e-08;
            for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                             -0.00417768164, 0.246640727, 1.50140941})
                x = c + x * w;
        } else {
            w = std::sqrt(w) - 3.0;
            x = -0.000200214257;
            for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                             1.00167406, 2.83297682})
                x = c + x * w;
        }
        x *= y;
        for (int step = 0; step < 2; ++step)
            x -= (std::erf(x) - y) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
        return x;
    }

    // The starting score of MIN/MAX aggregation, as the ONNX reference sets it: the type's largest finite value.
    static double largest_finite(int32_t type) {
        switch (type) {
            case TESS_ELEMENT_FLOAT64:
                return std::numeric_limits<double>::max();
            case TESS_ELEMENT_FLOAT16:
                return 65504.0;
            default:
                return std::numeric_limits<float>::max();
        }
    }

    std::vector<Node> nodes_;
    std::vector<std::vector<double>> sets_;
    std::vector<int64_t> roots_;
    std::vector<int64_t> leaf_targets_;
    std::vector<double> leaf_weights_;
    int64_t targets_;
    Aggregate aggregate_;
    PostTransform post_transform_;
    int64_t max_feature_ = -1;
};

// ---- Binarizer, Scaler, Normalizer, Imputer ----------------------------------------------------------------------

class BinarizerKernel final : public Kernel {
public:
    explicit BinarizerKernel(const NodeInfo& info) : threshold_(info.attr_float("threshold", 0.0f)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        Tensor& y = ctx.output(0, x.type, x.shape);
        dispatch<float, double, int64_t, int32_t>(x.type, [&]<typename T>() {
            const T* in = x.ptr<T>();
            T* out = y.ptr<T>();
            for (int64_t i = 0; i < x.size(); ++i) out[i] = double(in[i]) > threshold_ ? T(1) : T(0);
        });
    }

private:
    double threshold_;
};

// y = (x - offset) * scale per column (one value or one per column), in float.
class ScalerKernel final : public Kernel {
public:
    explicit ScalerKernel(const NodeInfo& info)
        : offset_(info.attr_floats("offset")), scale_(info.attr_floats("scale")) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Matrix m = as_matrix(x);
        const auto column_values = [&](const std::vector<float>& v, float fallback, const char* name) {
            if (v.empty()) return std::vector<float>(size_t(m.columns), fallback);
            if (v.size() == 1) return std::vector<float>(size_t(m.columns), v[0]);
            if (int64_t(v.size()) != m.columns)
                throw KernelError(std::string("Scaler: ") + name + " must have 1 or " + std::to_string(m.columns) +
                                  " values");
            return v;
        };
        const std::vector<float> offset = column_values(offset_, 0.0f, "offset"),
                                 scale = column_values(scale_, 1.0f, "scale");
        const ConvertedInput<float> in(x, ctx.pool());
        float* out = ctx.output(0, TESS_ELEMENT_FLOAT32, x.shape).ptr<float>();
        for (int64_t i = 0; i < x.size(); ++i) {
            const size_t c = size_t(i % m.columns);
            out[i] = (in.data()[i] - offset[c]) * scale[c];
        }
    }

private:
    std::vector<float> offset_, scale_;
};

// Each row divided by its max-abs, L1 or L2 norm (at least 1e-30), in float.
class NormalizerKernel final : public Kernel {
public:
    explicit NormalizerKernel(const NodeInfo& info) : norm_(info.attr_string("norm", "MAX")) {
        if (norm_ != "MAX" && norm_ != "L1" && norm_ != "L2")
            throw KernelError("Normalizer: norm must be MAX, L1 or L2, got '" + norm_ + "'");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() > 2) throw KernelError("Normalizer: X must be [N, C] or [C], got " + shape_string(x.shape));
        const Matrix m = as_matrix(x);
        const ConvertedInput<float> in(x, ctx.pool());
        float* out = ctx.output(0, TESS_ELEMENT_FLOAT32, x.shape).ptr<float>();
        for (int64_t r = 0; r < m.rows; ++r) {
            const float* row = in.data() + r * m.columns;
            float norm = 0;
            for (int64_t c = 0; c < m.columns; ++c) {
                if (norm_ == "MAX")
                    norm = std::max(norm, std::abs(row[c]));
                else
                    norm += norm_ == "L1" ? std::abs(row[c]) : row[c] * row[c];
            }
            if (norm_ == "L2") norm = std::sqrt(norm);
            norm = std::max(norm, 1e-30f);
            for (int64_t c = 0; c < m.columns; ++c) out[r * m.columns + c] = row[c] / norm;
        }
    }

private:
    std::string norm_;
};

// Replaces one marker value (NaN for floats by default) by a per-column imputed value.
class ImputerKernel final : public Kernel {
public:
    explicit ImputerKernel(const NodeInfo& info)
        : float_values_(info.attr_floats("imputed_value_floats")),
          int_values_(info.attr_ints("imputed_value_int64s")),
          replaced_float_(info.attr_float("replaced_value_float", 0.0f)),
          replaced_int_(info.attr_int("replaced_value_int64", 0)) {
        if (float_values_.empty() && int_values_.empty())
            throw KernelError("Imputer: imputed_value_floats or imputed_value_int64s is required");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Matrix m = as_matrix(x);
        Tensor& y = ctx.output(0, x.type, x.shape);
        dispatch<float, double, int64_t, int32_t>(x.type, [&]<typename T>() {
            constexpr bool kReal = std::is_floating_point_v<T>;
            const size_t count = kReal ? float_values_.size() : int_values_.size();
            if (count != 1 && int64_t(count) != m.columns)
                throw KernelError("Imputer: need 1 or " + std::to_string(m.columns) +
                                  " imputed values of the input's kind");
            const T* in = x.ptr<T>();
            T* out = y.ptr<T>();
            for (int64_t i = 0; i < x.size(); ++i) {
                const size_t c = count == 1 ? 0 : size_t(i % m.columns);
                bool replace;
                if constexpr (kReal) {
                    replace = std::isnan(replaced_float_) ? std::isnan(in[i]) : in[i] == T(replaced_float_);
                } else {
                    replace = int64_t(in[i]) == replaced_int_;
                }
                out[i] = replace ? (kReal ? T(float_values_[c]) : T(int_values_[c])) : in[i];
            }
        });
    }

private:
    std::vector<float> float_values_;
    std::vector<int64_t> int_values_;
    float replaced_float_;
    int64_t replaced_int_;
};

// ---- ArrayFeatureExtractor, OneHotEncoder, FeatureVectorizer -----------------------------------------------------

// Selects columns of the last axis; a 1-D input gives one row, as ONNX Runtime does.
class ArrayFeatureExtractorKernel final : public Kernel {
public:
    explicit ArrayFeatureExtractorKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() == 0) throw KernelError("ArrayFeatureExtractor: X must have at least one dimension");
        const int64_t columns = x.shape.back();
        std::vector<int64_t> indices = movement::read_integers(ctx.input(1), "ArrayFeatureExtractor indices");
        for (int64_t& index : indices) {
            if (index < -columns || index >= columns)
                throw KernelError("ArrayFeatureExtractor: index " + std::to_string(index) + " is out of range for " +
                                  std::to_string(columns) + " columns");
            if (index < 0) index += columns;
        }
        Shape shape = x.rank() == 1 ? Shape{1} : Shape(x.shape.begin(), x.shape.end() - 1);
        shape.push_back(int64_t(indices.size()));
        Tensor& y = ctx.output(0, x.type, shape);
        select_slices(ctx.host(), ctx.pool(), x, y, columns ? x.size() / columns : 0, columns, 1, indices);
    }
};

// One float one-hot row per input element over the listed categories.
class OneHotEncoderKernel final : public Kernel {
public:
    explicit OneHotEncoderKernel(const NodeInfo& info) : zeros_(info.attr_int("zeros", 1) != 0) {
        const std::vector<int64_t> ints = info.attr_ints("cats_int64s");
        const std::vector<std::string> strings = info.attr_strings("cats_strings");
        for (size_t i = 0; i < ints.size(); ++i) int_categories_.emplace(ints[i], int64_t(i));
        for (size_t i = 0; i < strings.size(); ++i) string_categories_.emplace(strings[i], int64_t(i));
        categories_ = int64_t(std::max(ints.size(), strings.size()));
        if (categories_ == 0) throw KernelError("OneHotEncoder: cats_int64s or cats_strings is required");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        Shape shape = x.shape;
        shape.push_back(categories_);
        float* out = ctx.output(0, TESS_ELEMENT_FLOAT32, shape).ptr<float>();
        std::fill(out, out + shape_size(shape), 0.0f);
        std::vector<int64_t> category(static_cast<size_t>(x.size()), -1);
        const auto find = [](const auto& map, const auto& key) {
            const auto at = map.find(key);
            return at == map.end() ? int64_t(-1) : at->second;
        };
        if (x.type == TESS_ELEMENT_STRING) {
            for (size_t i = 0; i < category.size(); ++i)
                category[i] = find(string_categories_, std::string(values::get_string(ctx.host(), x.value, i)));
        } else {
            std::vector<int64_t> keys(category.size());
            convert::load_int64s(x.type, x.data, 0, x.size(), keys.data());
            for (size_t i = 0; i < category.size(); ++i) category[i] = find(int_categories_, keys[i]);
        }
        for (size_t i = 0; i < category.size(); ++i) {
            if (category[i] >= 0)
                out[int64_t(i) * categories_ + category[i]] = 1.0f;
            else if (!zeros_)
                throw KernelError("OneHotEncoder: a value is in no category and zeros is 0");
        }
    }

private:
    bool zeros_;
    int64_t categories_ = 0;
    std::unordered_map<int64_t, int64_t> int_categories_;
    std::unordered_map<std::string, int64_t> string_categories_;
};

// Concatenates the inputs' columns (each cut or zero-padded to its inputdimensions entry) into float rows.
class FeatureVectorizerKernel final : public Kernel {
public:
    explicit FeatureVectorizerKernel(const NodeInfo& info) : dimensions_(info.attr_ints("inputdimensions")) {
        if (dimensions_.size() != info.input_count())
            throw KernelError("FeatureVectorizer: inputdimensions needs one entry per input");
        for (int64_t d : dimensions_)
            if (d < 0) throw KernelError("FeatureVectorizer: inputdimensions must not be negative");
    }

    void compute(KernelContext& ctx) const override {
        // A 1-D input is one column per row, as in the ONNX reference.
        const auto rows_of = [](const Tensor& t) { return t.rank() == 0 ? int64_t(1) : t.shape[0]; };
        const int64_t rows = rows_of(ctx.input(0));
        int64_t width = 0;
        for (size_t i = 0; i < ctx.input_count(); ++i) {
            const Tensor& t = ctx.input(i);
            if (t.rank() > 2 || rows_of(t) != rows)
                throw KernelError("FeatureVectorizer: inputs must be [N] or [N, C] with the same N");
            width += dimensions_[i];
        }
        float* out = ctx.output(0, TESS_ELEMENT_FLOAT32, {rows, width}).ptr<float>();
        std::fill(out, out + rows * width, 0.0f);
        int64_t column = 0;
        for (size_t i = 0; i < ctx.input_count(); ++i) {
            const Tensor& t = ctx.input(i);
            const ConvertedInput<float> in(t, ctx.pool());
            const int64_t columns = t.rank() == 2 ? t.shape[1] : 1;
            const int64_t used = std::min(columns, dimensions_[i]);
            for (int64_t r = 0; r < rows; ++r)
                std::copy(in.data() + r * columns, in.data() + r * columns + used, out + r * width + column);
            column += dimensions_[i];
        }
    }

private:
    std::vector<int64_t> dimensions_;
};

}  // namespace

void register_ml_kernels(KernelRegistry& registry) {
    const auto add = [&](const char* op, int since, int end, KernelFactory factory, std::vector<int32_t> types) {
        registry.add({kMlDomain, op, since, end, {{0, std::move(types)}}, KernelMemory::Normal, std::move(factory)});
    };
    const std::vector<int32_t> ml_numeric{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT64,
                                          TESS_ELEMENT_INT32};
    // Opset 1 maps through classes_strings, opsets 2-3 through keys_*/values_*; opset 4 adds tensor keys and
    // values and more types (the same kernel reads whichever attributes are there).
    add("LabelEncoder", 1, 1, make_factory<LabelEncoderKernel>(), {TESS_ELEMENT_STRING, TESS_ELEMENT_INT64});
    add("LabelEncoder", 2, 0, make_factory<LabelEncoderKernel>(),
        {TESS_ELEMENT_STRING, TESS_ELEMENT_INT64, TESS_ELEMENT_FLOAT32, TESS_ELEMENT_INT32, TESS_ELEMENT_INT16,
         TESS_ELEMENT_FLOAT64});
    add("TreeEnsemble", 5, 0, make_factory<TreeEnsembleKernel>(),
        {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16});
    add("Binarizer", 1, 0, make_factory<BinarizerKernel>(), ml_numeric);
    add("Scaler", 1, 0, make_factory<ScalerKernel>(), ml_numeric);
    add("Normalizer", 1, 0, make_factory<NormalizerKernel>(), ml_numeric);
    add("Imputer", 1, 0, make_factory<ImputerKernel>(), ml_numeric);
    std::vector<int32_t> extractable = ml_numeric;
    extractable.push_back(TESS_ELEMENT_STRING);
    add("ArrayFeatureExtractor", 1, 0, make_factory<ArrayFeatureExtractorKernel>(), extractable);
    add("OneHotEncoder", 1, 0, make_factory<OneHotEncoderKernel>(), extractable);
    add("FeatureVectorizer", 1, 0, make_factory<FeatureVectorizerKernel>(), ml_numeric);
}

}  // namespace tessera::cpu
