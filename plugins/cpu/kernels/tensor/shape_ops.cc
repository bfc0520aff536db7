// CPU provider: operators that reinterpret or describe shapes (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Dropout in inference, Shape, Size) and the ones that make tensors from nothing but attributes and shapes
// (Constant, ConstantOfShape, EyeLike, Range).  Shape changes never copy: the output aliases the input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/type_list.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

using movement::element_size;
using movement::read_integers;

// One element of `type` holding `number`, as raw bytes (fixed-size non-packed types).
std::vector<std::byte> encode_number(int32_t type, double number) {
    std::vector<std::byte> bytes(std::max<size_t>(element_size(type), 1));
    convert::store_number(type, bytes.data(), 0, number);
    return bytes;
}

// Fills a fixed-size tensor with one number.
void fill_with_number(Tensor& tensor, double number, ThreadPool& pool) {
    if (fp::packed_bits(tensor.type)) {
        for (int64_t i = 0; i < tensor.size(); ++i) convert::store_number(tensor.type, tensor.data, i, number);
        return;
    }
    const std::vector<std::byte> one = encode_number(tensor.type, number);
    movement::fill_elements(static_cast<std::byte*>(tensor.data), one.data(), one.size(), tensor.size(), pool);
}

// ---- Reshape -----------------------------------------------------------------------------------------------------

Shape reshape_target(const Shape& input, const std::vector<int64_t>& requested, bool allow_zero) {
    Shape output(requested.size());
    std::optional<size_t> inferred;
    int64_t known = 1;
    bool has_zero = false;
    for (size_t i = 0; i < requested.size(); ++i) {
        const int64_t d = requested[i];
        if (d == -1) {
            if (inferred)
                throw KernelError("Reshape: more than one -1 in the requested shape " + shape_string(requested));
            inferred = i;
            continue;
        }
        if (d < -1)
            throw KernelError("Reshape: invalid dimension " + std::to_string(d) + " in " + shape_string(requested));
        if (d == 0 && !allow_zero) {
            if (i >= input.size())
                throw KernelError("Reshape: 0 at position " + std::to_string(i) + " copies a dimension the input " +
                                  shape_string(input) + " does not have");
            output[i] = input[i];
        } else {
            output[i] = d;
            has_zero = has_zero || d == 0;
        }
        // A requested shape whose product overflows can never match the input (fuzz_model found 15 x INT64_MAX).
        if (__builtin_mul_overflow(known, output[i], &known))
            throw KernelError("Reshape: the requested shape " + shape_string(requested) +
                              " has more elements than 64 bits count");
    }
    const int64_t total = shape_size(input);
    if (inferred) {
        if (allow_zero && has_zero) throw KernelError("Reshape: allowzero forbids 0 together with -1");
        if (known == 0 || total % known != 0)
            throw KernelError("Reshape: cannot infer the -1 dimension reshaping " + shape_string(input) + " to " +
                              shape_string(requested));
        output[*inferred] = total / known;
    } else if (known != total) {
        throw KernelError("Reshape: cannot reshape " + shape_string(input) + " (" + std::to_string(total) +
                          " elements) to " + shape_string(output));
    }
    return output;
}

class ReshapeKernel final : public Kernel {
public:
    explicit ReshapeKernel(const NodeInfo& info)
        : shape_from_attribute_(info.opset() < 5), allow_zero_(info.attr_int("allowzero", 0) != 0) {
        if (shape_from_attribute_) shape_attribute_ = info.attr_ints("shape");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        std::vector<int64_t> requested;
        if (shape_from_attribute_) {
            requested = shape_attribute_;
        } else {
            if (!ctx.has_input(1)) throw KernelError("Reshape: the shape input is missing");
            const Tensor& shape = ctx.input(1);
            if (shape.rank() != 1)
                throw KernelError("Reshape: the shape input must be 1-D, got " + shape_string(shape.shape));
            requested = read_integers(shape, "Reshape shape");
        }
        ctx.alias_output(0, 0, reshape_target(input.shape, requested, allow_zero_));
    }

private:
    bool shape_from_attribute_;
    bool allow_zero_;
    std::vector<int64_t> shape_attribute_;
};

// ---- Flatten -----------------------------------------------------------------------------------------------------

class FlattenKernel final : public Kernel {
public:
    explicit FlattenKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", 1)), negative_allowed_(info.opset() >= 11) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const int64_t rank = int64_t(input.rank());
        if (axis_ > rank || axis_ < (negative_allowed_ ? -rank : 0))
            throw KernelError("Flatten: axis " + std::to_string(axis_) + " is out of range for rank " +
                              std::to_string(rank));
        const size_t axis = size_t(axis_ < 0 ? axis_ + rank : axis_);
        const Shape output{movement::product(input.shape, 0, axis), movement::product(input.shape, axis, input.rank())};
        ctx.alias_output(0, 0, output);
    }

private:
    int64_t axis_;
    bool negative_allowed_;
};

// ---- Squeeze / Unsqueeze -----------------------------------------------------------------------------------------

// Axes come from the attribute before opset 13 and from the optional second input since.
class AxesSource {
public:
    explicit AxesSource(const NodeInfo& info) : from_input_(info.opset() >= 13) {
        if (!from_input_ && info.has_attr("axes")) attribute_ = info.attr_ints("axes");
    }
    std::optional<std::vector<int64_t>> get(const KernelContext& ctx, std::string_view op) const {
        if (!from_input_) return attribute_;
        if (!ctx.has_input(1)) return std::nullopt;
        return read_axes_tensor(op, ctx.input(1));
    }

private:
    bool from_input_;
    std::optional<std::vector<int64_t>> attribute_;
};

class SqueezeKernel final : public Kernel {
public:
    explicit SqueezeKernel(const NodeInfo& info) : axes_(info) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const std::optional<std::vector<int64_t>> axes = axes_.get(ctx, "Squeeze");
        std::vector<bool> drop(input.rank(), false);
        if (axes && !axes->empty()) {  // empty axes squeeze every unit dim, as when they are absent (like ORT)
            for (size_t axis : normalize_axes("Squeeze", *axes, input.rank())) {
                if (input.shape[axis] != 1)
                    throw KernelError("Squeeze: dimension " + std::to_string(axis) + " of " +
                                      shape_string(input.shape) + " is not 1");
                drop[axis] = true;
            }
        } else {
            for (size_t i = 0; i < input.rank(); ++i) drop[i] = input.shape[i] == 1;
        }
        Shape output;
        for (size_t i = 0; i < input.rank(); ++i)
            if (!drop[i]) output.push_back(input.shape[i]);
        ctx.alias_output(0, 0, output);
    }

private:
    AxesSource axes_;
};

class UnsqueezeKernel final : public Kernel {
public:
    explicit UnsqueezeKernel(const NodeInfo& info) : axes_(info) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const std::optional<std::vector<int64_t>> axes = axes_.get(ctx, "Unsqueeze");
        if (!axes) throw KernelError("Unsqueeze: axes are required");
        const size_t rank = input.rank() + axes->size();
        std::vector<bool> inserted(rank, false);
        for (size_t axis : normalize_axes("Unsqueeze", *axes, rank)) inserted[axis] = true;
        Shape output(rank);
        size_t next = 0;
        for (size_t i = 0; i < rank; ++i) output[i] = inserted[i] ? 1 : input.shape[next++];
        ctx.alias_output(0, 0, output);
    }

private:
    AxesSource axes_;
};

// ---- Identity ----------------------------------------------------------------------------------------------------

class IdentityKernel final : public Kernel {
public:
    explicit IdentityKernel(const NodeInfo& info) {
        const TessValueView* input = info.has_input(0) ? info.view().inputs[0] : nullptr;
        known_tensor_ = input != nullptr && input->kind == TESS_VALUE_TENSOR;
    }

    void compute(KernelContext& ctx) const override {
        if (!known_tensor_) {
            // Sequences and optionals pass as values; the input belongs to the executor, so hand over a copy.
            const TessValue* value = ctx.input_value(0);
            if (value != nullptr && ctx.host().value_kind(value) != TESS_VALUE_TENSOR) {
                ctx.set_output_value(0, values::clone(ctx.host(), value).release());
                return;
            }
        }
        ctx.alias_output(0, 0, ctx.input(0).shape);
    }

private:
    bool known_tensor_ = false;
};

// ---- Dropout -----------------------------------------------------------------------------------------------------

class DropoutKernel final : public Kernel {
public:
    explicit DropoutKernel(const NodeInfo& info) : opset_(info.opset()), ratio_(info.attr_float("ratio", 0.5f)) {
        if (info.has_attr("seed")) seed_ = uint64_t(info.attr_int("seed"));
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        float ratio = ratio_;
        bool training = false;  // before opset 12 only inference is defined for a runtime
        if (opset_ >= 12) {
            if (ctx.has_input(1)) ratio = read_scalar_float(ctx.input(1), "ratio");
            if (ctx.has_input(2)) {
                const Tensor& mode = ctx.input(2);
                if (mode.size() != 1 || mode.type != TESS_ELEMENT_BOOL)
                    throw KernelError("Dropout: training_mode must be a bool scalar");
                training = *mode.ptr<bool>();
            }
        }
        const bool want_mask = ctx.output_count() > 1 && ctx.output_wanted(1);
        const int32_t mask_type = opset_ >= 10 ? TESS_ELEMENT_BOOL : input.type;
        if (!training || ratio == 0.0f) {
            ctx.alias_output(0, 0, input.shape);
            if (want_mask) {
                Tensor& mask = ctx.output(1, mask_type, input.shape);
                fill_with_number(mask, 1.0, ctx.pool());
            }
            return;
        }
        if (!(ratio >= 0.0f && ratio < 1.0f)) throw KernelError("Dropout: ratio must be in [0, 1) when training");
        Tensor& output = ctx.output(0, input.type, input.shape);
        // The draws follow numpy's legacy generator (seed -> MT19937, 53-bit uniform doubles, keep when u >= ratio),
        // which is what ONNX's reference outputs were computed with, so a seeded node reproduces them.
        std::vector<uint8_t> keep(size_t(input.size()));
        std::mt19937 engine(seed_ ? uint32_t(*seed_) : std::random_device{}());
        for (auto& k : keep) {
            const uint32_t high = engine() >> 5, low = engine() >> 6;
            const double uniform = (double(high) * 67108864.0 + double(low)) / 9007199254740992.0;
            k = uniform >= double(ratio) ? 1 : 0;
        }
        const float scale = 1.0f / (1.0f - ratio);
        dispatch<float, double, fp::Half, fp::BFloat16>(input.type, [&]<typename T>() {
            const T* x = input.ptr<T>();
            T* y = output.ptr<T>();
            for (size_t i = 0; i < keep.size(); ++i) {
                const float value = convert::convert_value<float>(x[i]);
                y[i] = convert::convert_value<T>(keep[i] ? value * scale : 0.0f);
            }
        });
        if (want_mask) {
            Tensor& mask = ctx.output(1, mask_type, input.shape);
            for (size_t i = 0; i < keep.size(); ++i) convert::store_number(mask_type, mask.data, int64_t(i), keep[i]);
        }
    }

private:
    static float read_scalar_float(const Tensor& t, std::string_view what) {
        if (t.size() != 1) throw KernelError("Dropout: " + std::string(what) + " must be a scalar");
        double value = 0;
        convert::load_doubles(t.type, t.data, 0, 1, &value);
        return float(value);
    }

    int64_t opset_;
    float ratio_;
    std::optional<uint64_t> seed_;
};

// ---- Shape / Size ------------------------------------------------------------------------------------------------

class ShapeKernel final : public Kernel {
public:
    explicit ShapeKernel(const NodeInfo& info) : start_(info.attr_int("start", 0)) {
        if (info.has_attr("end")) end_ = info.attr_int("end");
    }

    void compute(KernelContext& ctx) const override {
        const Shape& shape = ctx.input(0).shape;
        const int64_t rank = int64_t(shape.size());
        const auto clamp_axis = [rank](int64_t axis) {
            return std::clamp(axis < 0 ? axis + rank : axis, int64_t(0), rank);
        };
        const int64_t begin = clamp_axis(start_);
        const int64_t end = std::max(begin, end_ ? clamp_axis(*end_) : rank);
        Tensor& output = ctx.output(0, TESS_ELEMENT_INT64, Shape{end - begin});
        std::copy(shape.begin() + begin, shape.begin() + end, output.ptr<int64_t>());
    }

private:
    int64_t start_;
    std::optional<int64_t> end_;
};

class SizeKernel final : public Kernel {
public:
    explicit SizeKernel(const NodeInfo&) {}
    void compute(KernelContext& ctx) const override {
        const int64_t size = ctx.input(0).size();
        *ctx.output(0, TESS_ELEMENT_INT64, Shape{}).ptr<int64_t>() = size;
    }
};

// ---- Constant ----------------------------------------------------------------------------------------------------

// A tensor copied out of the model (attribute values are only valid while the kernel is created).
struct OwnedTensor {
    int32_t type = TESS_ELEMENT_FLOAT32;
    Shape shape;
    std::vector<std::byte> bytes;
    std::vector<std::string> strings;

    static OwnedTensor copy_of(const TessValue* value) {
        const TessHostApi& h = host();
        const Tensor view = tensor_of(value);
        OwnedTensor result;
        result.type = view.type;
        result.shape = view.shape;
        if (view.type == TESS_ELEMENT_STRING) {
            for (int64_t i = 0; i < view.size(); ++i)
                result.strings.emplace_back(values::get_string(h, value, size_t(i)));
        } else {
            const auto* data = static_cast<const std::byte*>(view.data);
            result.bytes.assign(data, data + view.byte_size());
        }
        return result;
    }

    void write_to(KernelContext& ctx, size_t index) const {
        Tensor& out = ctx.output(index, type, shape);
        if (type == TESS_ELEMENT_STRING) {
            for (size_t i = 0; i < strings.size(); ++i) values::set_string(ctx.host(), out.value, i, strings[i]);
        } else if (!bytes.empty()) {
            std::memcpy(out.data, bytes.data(), bytes.size());
        }
    }
};

template <typename T> OwnedTensor owned_from(const std::vector<T>& items, int32_t type, bool scalar) {
    OwnedTensor result;
    result.type = type;
    if (!scalar) result.shape = {int64_t(items.size())};
    const auto* data = reinterpret_cast<const std::byte*>(items.data());
    result.bytes.assign(data, data + items.size() * sizeof(T));
    return result;
}

class ConstantKernel final : public Kernel {
public:
    explicit ConstantKernel(const NodeInfo& info) {
        if (const TessValue* value = info.attr_tensor("value")) {
            tensor_ = OwnedTensor::copy_of(value);
        } else if (info.has_attr("value_float")) {
            tensor_ = owned_from(std::vector<float>{info.attr_float("value_float", 0)}, TESS_ELEMENT_FLOAT32, true);
        } else if (info.has_attr("value_floats")) {
            tensor_ = owned_from(info.attr_floats("value_floats"), TESS_ELEMENT_FLOAT32, false);
        } else if (info.has_attr("value_int")) {
            tensor_ = owned_from(std::vector<int64_t>{info.attr_int("value_int")}, TESS_ELEMENT_INT64, true);
        } else if (info.has_attr("value_ints")) {
            tensor_ = owned_from(info.attr_ints("value_ints"), TESS_ELEMENT_INT64, false);
        } else if (info.has_attr("value_string")) {
            tensor_.type = TESS_ELEMENT_STRING;
            tensor_.strings = {info.attr_string("value_string", "")};
        } else if (info.has_attr("value_strings")) {
            tensor_.type = TESS_ELEMENT_STRING;
            tensor_.strings = info.attr_strings("value_strings");
            tensor_.shape = {int64_t(tensor_.strings.size())};
        } else if (info.has_attr("sparse_value")) {
            throw KernelError("Constant: sparse_value is not supported");
        } else {
            throw KernelError("Constant: no value attribute");
        }
    }

    void compute(KernelContext& ctx) const override { tensor_.write_to(ctx, 0); }

private:
    OwnedTensor tensor_;
};

class ConstantOfShapeKernel final : public Kernel {
public:
    explicit ConstantOfShapeKernel(const NodeInfo& info) {
        if (const TessValue* value = info.attr_tensor("value")) {
            value_ = OwnedTensor::copy_of(value);
            if (shape_size(value_.shape) != 1)
                throw KernelError("ConstantOfShape: value must hold exactly one element");
            if (value_.type == TESS_ELEMENT_STRING)
                throw KernelError("ConstantOfShape: string values are not supported");
        } else {
            value_ = owned_from(std::vector<float>{0.0f}, TESS_ELEMENT_FLOAT32, true);
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& shape_input = ctx.input(0);
        if (shape_input.rank() != 1) throw KernelError("ConstantOfShape: the shape input must be 1-D");
        const Shape shape = read_integers(shape_input, "ConstantOfShape input");
        for (int64_t d : shape)
            if (d < 0) throw KernelError("ConstantOfShape: negative dimension in " + shape_string(shape));
        Tensor& output = ctx.output(0, value_.type, shape);
        if (const int bits = fp::packed_bits(value_.type)) {
            const uint8_t code = fp::load_packed(value_.bytes.data(), bits, 0);
            for (int64_t i = 0; i < output.size(); ++i) fp::store_packed(output.data, bits, i, code);
            return;
        }
        movement::fill_elements(static_cast<std::byte*>(output.data), value_.bytes.data(), value_.bytes.size(),
                                output.size(), ctx.pool());
    }

private:
    OwnedTensor value_;
};

// ---- EyeLike -----------------------------------------------------------------------------------------------------

class EyeLikeKernel final : public Kernel {
public:
    explicit EyeLikeKernel(const NodeInfo& info) : k_(info.attr_int("k", 0)) {
        if (info.has_attr("dtype")) dtype_ = int32_t(info.attr_int("dtype"));
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (input.rank() != 2) throw KernelError("EyeLike: input must be 2-D, got " + shape_string(input.shape));
        const int32_t type = dtype_.value_or(input.type);
        if (!convert::is_value_type(type)) throw_unsupported_type("EyeLike", type);
        Tensor& output = ctx.output(0, type, input.shape);
        const size_t es = element_size(type);
        std::memset(output.data, 0, output.byte_size());
        const std::vector<std::byte> one = encode_number(type, 1.0);
        auto* out = static_cast<std::byte*>(output.data);
        const int64_t rows = input.shape[0], cols = input.shape[1];
        for (int64_t i = std::max<int64_t>(0, -k_); i < rows && i + k_ < cols; ++i)
            std::memcpy(out + size_t(i * cols + i + k_) * es, one.data(), es);
    }

private:
    int64_t k_;
    std::optional<int32_t> dtype_;
};

// ---- Range -------------------------------------------------------------------------------------------------------

class RangeKernel final : public Kernel {
public:
    explicit RangeKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& start = ctx.input(0);
        const Tensor& limit = ctx.input(1);
        const Tensor& delta = ctx.input(2);
        for (const Tensor* t : {&start, &limit, &delta})
            if (t->size() != 1) throw KernelError("Range: start, limit and delta must be scalars");
        dispatch<float, double, int16_t, int32_t, int64_t, fp::Half, fp::BFloat16>(start.type, [&]<typename T>() {
            if (limit.type != start.type || delta.type != start.type)
                throw KernelError("Range: start, limit and delta must have one type");
            // float16/bfloat16 count in float, like every other arithmetic on them.
            using Compute =
                std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
            const Compute first = convert::convert_value<Compute>(*start.ptr<T>());
            const Compute last = convert::convert_value<Compute>(*limit.ptr<T>());
            const Compute step = convert::convert_value<Compute>(*delta.ptr<T>());
            if (step == Compute(0)) throw KernelError("Range: delta must not be zero");
            int64_t count;
            if constexpr (std::is_integral_v<Compute>) {
                const int64_t span = int64_t(last) - int64_t(first);
                const int64_t s = int64_t(step);
                count = span / s + ((span % s != 0 && ((span < 0) == (s < 0))) ? 1 : 0);
            } else {
                const double steps = std::ceil((double(last) - double(first)) / double(step));
                if (std::isnan(steps) || steps > 9.0e15)
                    throw KernelError("Range: start, limit and delta give no finite element count");
                count = steps > 0 ? int64_t(steps) : 0;
            }
            count = std::max<int64_t>(count, 0);
            Tensor& output = ctx.output(0, start.type, Shape{count});
            T* out = output.ptr<T>();
            for (int64_t i = 0; i < count; ++i) out[i] = convert::convert_value<T>(Compute(first + Compute(i) * step));
        });
    }
};

}  // namespace

void register_shape_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> float_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16,
                                           TESS_ELEMENT_BFLOAT16};
    const std::vector<int32_t> range_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT16,
                                           TESS_ELEMENT_INT32,   TESS_ELEMENT_INT64,   TESS_ELEMENT_FLOAT16,
                                           TESS_ELEMENT_BFLOAT16};
    registry.add({"", "Reshape", 1, 4, {}, KernelMemory::Normal, make_factory<ReshapeKernel>()});
    registry.add({"", "Reshape", 5, 0, {}, KernelMemory::Normal, make_factory<ReshapeKernel>()});
    registry.add({"", "Flatten", 1, 0, {}, KernelMemory::Normal, make_factory<FlattenKernel>()});
    registry.add({"", "Squeeze", 1, 12, {}, KernelMemory::Normal, make_factory<SqueezeKernel>()});
    registry.add({"", "Squeeze", 13, 0, {}, KernelMemory::Normal, make_factory<SqueezeKernel>()});
    registry.add({"", "Unsqueeze", 1, 12, {}, KernelMemory::Normal, make_factory<UnsqueezeKernel>()});
    registry.add({"", "Unsqueeze", 13, 0, {}, KernelMemory::Normal, make_factory<UnsqueezeKernel>()});
    registry.add({"", "Identity", 1, 0, {}, KernelMemory::Normal, make_factory<IdentityKernel>()});
    registry.add({"", "Dropout", 1, 0, {{0, float_types}}, KernelMemory::Normal, make_factory<DropoutKernel>()});
    registry.add({"", "Shape", 1, 0, {}, KernelMemory::Normal, make_factory<ShapeKernel>()});
    registry.add({"", "Size", 1, 0, {}, KernelMemory::Normal, make_factory<SizeKernel>()});
    registry.add({"", "Constant", 1, 0, {}, KernelMemory::Normal, make_factory<ConstantKernel>()});
    registry.add({"",
                  "ConstantOfShape",
                  9,
                  0,
                  {{0, {TESS_ELEMENT_INT64}}},
                  KernelMemory::Normal,
                  make_factory<ConstantOfShapeKernel>()});
    registry.add({"",
                  "EyeLike",
                  9,
                  0,
                  {{0, element_types_where(convert::is_value_type)}},
                  KernelMemory::Normal,
                  make_factory<EyeLikeKernel>()});
    registry.add({"",
                  "Range",
                  11,
                  0,
                  {{0, range_types}, {1, range_types}, {2, range_types}},
                  KernelMemory::Normal,
                  make_factory<RangeKernel>()});
}

}  // namespace tessera::cpu
