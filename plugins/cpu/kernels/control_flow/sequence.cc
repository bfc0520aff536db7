// CPU provider: value containers: tensor sequences (SequenceEmpty, SequenceConstruct, SequenceAt, SequenceInsert,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence) and optionals (Optional, OptionalHasElement,
// OptionalGetElement).  Containers are host TessValues: inputs are read through the host accessors and belong to
// the executor, so every tensor that goes into a new container is copied; outputs are built with the host's value
// constructors and handed over with set_output_value.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/data_movement.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

using movement::product;
using values::OwnedValue;

const TessValue* sequence_input(const KernelContext& ctx, size_t index, std::string_view op) {
    const TessValue* sequence = ctx.input_value(index);
    if (sequence == nullptr || ctx.host().value_kind(sequence) != TESS_VALUE_SEQUENCE)
        throw KernelError(std::string(op) + ": input " + std::to_string(index) + " is not a sequence");
    return sequence;
}

// Copies of the items of a sequence.
std::vector<OwnedValue> copy_items(const TessHostApi& host, const TessValue* sequence) {
    std::vector<OwnedValue> items;
    const size_t length = host.sequence_length(sequence);
    items.reserve(length + 1);
    for (size_t i = 0; i < length; ++i) items.push_back(values::clone(host, host.sequence_at(sequence, i)));
    return items;
}

// A scalar position into a sequence of `length` items; negative positions count from the end.  `allow_end` admits
// position == length (insertion at the back).
size_t read_position(const Tensor& tensor, size_t length, bool allow_end, std::string_view op) {
    if (tensor.size() != 1) throw KernelError(std::string(op) + ": position must be a scalar");
    int64_t position = movement::read_integers(tensor, op)[0];
    const int64_t n = int64_t(length);
    const int64_t limit = allow_end ? n : n - 1;
    if (position < -n || position > limit)
        throw KernelError(std::string(op) + ": position " + std::to_string(position) +
                          " is out of range for a sequence of " + std::to_string(length));
    if (position < 0) position += n;
    return size_t(position);
}

void set_sequence_output(KernelContext& ctx, int32_t element_type, std::vector<OwnedValue> items) {
    ctx.set_output_value(0, values::create_sequence(ctx.host(), element_type, std::move(items)).release());
}

class SequenceEmptyKernel final : public Kernel {
public:
    explicit SequenceEmptyKernel(const NodeInfo& info)
        : dtype_(int32_t(info.attr_int("dtype", TESS_ELEMENT_FLOAT32))) {}
    void compute(KernelContext& ctx) const override { set_sequence_output(ctx, dtype_, {}); }

private:
    int32_t dtype_;
};

class SequenceConstructKernel final : public Kernel {
public:
    explicit SequenceConstructKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        std::vector<OwnedValue> items;
        const int32_t type = ctx.input(0).type;
        for (size_t i = 0; i < ctx.input_count(); ++i) {
            const Tensor& tensor = ctx.input(i);
            if (tensor.type != type) throw KernelError("SequenceConstruct: all inputs must have one element type");
            items.push_back(values::copy_tensor(ctx.host(), tensor));
        }
        set_sequence_output(ctx, type, std::move(items));
    }
};

class SequenceAtKernel final : public Kernel {
public:
    explicit SequenceAtKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const TessValue* sequence = sequence_input(ctx, 0, "SequenceAt");
        const size_t position = read_position(ctx.input(1), h.sequence_length(sequence), false, "SequenceAt");
        const TessValue* item = h.sequence_at(sequence, position);
        Tensor& output = ctx.output(0, h.value_element_type(item), values::tensor_shape(h, item));
        values::copy_into(h, item, output);
    }
};

class SequenceInsertKernel final : public Kernel {
public:
    explicit SequenceInsertKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const TessValue* sequence = sequence_input(ctx, 0, "SequenceInsert");
        const Tensor& tensor = ctx.input(1);
        const int32_t type = h.value_element_type(sequence);
        if (tensor.type != type && type != TESS_ELEMENT_UNDEFINED)
            throw KernelError("SequenceInsert: the tensor's element type differs from the sequence's");
        std::vector<OwnedValue> items = copy_items(h, sequence);
        const size_t position =
            ctx.has_input(2) ? read_position(ctx.input(2), items.size(), true, "SequenceInsert") : items.size();
        items.insert(items.begin() + int64_t(position), values::copy_tensor(h, tensor));
        set_sequence_output(ctx, tensor.type, std::move(items));
    }
};

class SequenceEraseKernel final : public Kernel {
public:
    explicit SequenceEraseKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const TessValue* sequence = sequence_input(ctx, 0, "SequenceErase");
        std::vector<OwnedValue> items = copy_items(h, sequence);
        if (items.empty()) throw KernelError("SequenceErase: the sequence is empty");
        const size_t position =
            ctx.has_input(1) ? read_position(ctx.input(1), items.size(), false, "SequenceErase") : items.size() - 1;
        items.erase(items.begin() + int64_t(position));
        set_sequence_output(ctx, h.value_element_type(sequence), std::move(items));
    }
};

class SequenceLengthKernel final : public Kernel {
public:
    explicit SequenceLengthKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessValue* sequence = sequence_input(ctx, 0, "SequenceLength");
        *ctx.output(0, TESS_ELEMENT_INT64, Shape{}).ptr<int64_t>() = int64_t(ctx.host().sequence_length(sequence));
    }
};

class SplitToSequenceKernel final : public Kernel {
public:
    explicit SplitToSequenceKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", 0)), keepdims_(info.attr_int("keepdims", 1) != 0) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const Tensor& input = ctx.input(0);
        const size_t axis = normalize_axis("SplitToSequence", axis_, input.rank());
        const int64_t dim = input.shape[axis];
        std::vector<int64_t> sizes;
        bool squeeze = false;
        if (ctx.has_input(1)) {
            const Tensor& split = ctx.input(1);
            const std::vector<int64_t> values = movement::read_integers(split, "SplitToSequence split");
            if (split.rank() == 0) {
                if (values[0] <= 0) throw KernelError("SplitToSequence: split must be positive");
                for (int64_t start = 0; start < dim; start += values[0])
                    sizes.push_back(std::min(values[0], dim - start));
            } else {
                sizes = values;
                if (std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; }) ||
                    std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != dim)
                    throw KernelError("SplitToSequence: split sizes do not add up to dimension " + std::to_string(dim));
            }
        } else {
            sizes.assign(size_t(dim), 1);
            squeeze = !keepdims_;
        }

        std::vector<OwnedValue> items;
        std::vector<Tensor> views;
        for (int64_t size : sizes) {
            Shape shape = input.shape;
            shape[axis] = size;
            if (squeeze) shape.erase(shape.begin() + int64_t(axis));
            items.push_back(values::create_tensor(h, input.type, shape));
            views.push_back(tensor_of(items.back().get()));
        }
        std::vector<Tensor*> outputs;
        for (Tensor& view : views) outputs.push_back(&view);
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        const Tensor* inputs[] = {&input};
        movement::move_elements(h, inputs, outputs, [&](const movement::MoveBuffers& b) {
            std::vector<int64_t> part_bytes;
            for (int64_t size : sizes) part_bytes.push_back(size * inner * int64_t(b.element_size));
            movement::split_rows(b.inputs[0], b.outputs, part_bytes, outer, ctx.pool());
        });
        set_sequence_output(ctx, input.type, std::move(items));
    }

private:
    int64_t axis_;
    bool keepdims_;
};

class ConcatFromSequenceKernel final : public Kernel {
public:
    explicit ConcatFromSequenceKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis")), new_axis_(info.attr_int("new_axis", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const TessValue* sequence = sequence_input(ctx, 0, "ConcatFromSequence");
        const size_t length = h.sequence_length(sequence);
        if (length == 0) throw KernelError("ConcatFromSequence: the sequence is empty");
        std::vector<Tensor> items;
        for (size_t i = 0; i < length; ++i) items.push_back(tensor_of(h.sequence_at(sequence, i)));
        const Shape& first = items[0].shape;
        const size_t axis = normalize_axis("ConcatFromSequence", axis_, first.size() + (new_axis_ ? 1 : 0));
        // With new_axis every item gains a dimension of 1 at `axis` first.
        Shape shape = first;
        if (new_axis_)
            shape.insert(shape.begin() + int64_t(axis), 0);
        else
            shape[axis] = 0;
        std::vector<int64_t> extents;
        for (const Tensor& item : items) {
            bool compatible = item.type == items[0].type && item.rank() == first.size();
            for (size_t d = 0; compatible && d < first.size(); ++d)
                compatible = item.shape[d] == first[d] || (!new_axis_ && d == axis);
            if (!compatible)
                throw KernelError("ConcatFromSequence: item " + shape_string(item.shape) + " does not match " +
                                  shape_string(first));
            extents.push_back(new_axis_ ? 1 : item.shape[axis]);
            shape[axis] += extents.back();
        }
        Tensor& output = ctx.output(0, items[0].type, shape);
        const int64_t outer = product(shape, 0, axis);
        const int64_t inner = product(shape, axis + 1, shape.size());
        std::vector<const Tensor*> inputs;
        for (const Tensor& item : items) inputs.push_back(&item);
        Tensor* outputs[] = {&output};
        movement::move_elements(h, inputs, outputs, [&](const movement::MoveBuffers& b) {
            std::vector<int64_t> part_bytes;
            for (int64_t extent : extents) part_bytes.push_back(extent * inner * int64_t(b.element_size));
            movement::concat_rows(b.outputs[0], b.inputs, part_bytes, outer, ctx.pool());
        });
    }

private:
    int64_t axis_;
    bool new_axis_;
};

// ---- optionals ---------------------------------------------------------------------------------------------------

// A copy of input i, whatever its kind (tensor inputs need not be backed by a host value).
OwnedValue copy_input(const KernelContext& ctx, size_t index) {
    const TessValue* value = ctx.input_value(index);
    if (value != nullptr && ctx.host().value_kind(value) != TESS_VALUE_TENSOR) return values::clone(ctx.host(), value);
    return values::copy_tensor(ctx.host(), ctx.input(index));
}

// The kind of input i: an absent input reads as an empty optional.
int32_t input_kind(const KernelContext& ctx, size_t index) {
    if (!ctx.has_input(index)) return TESS_VALUE_UNKNOWN;
    const TessValue* value = ctx.input_value(index);
    return value != nullptr ? ctx.host().value_kind(value) : TESS_VALUE_TENSOR;
}

class OptionalKernel final : public Kernel {
public:
    explicit OptionalKernel(const NodeInfo& info) {
        // Without an input the element type comes from the 'type' attribute, which the node view does not carry;
        // the declared output type stands in for it.
        element_type_ = info.output_type(0);
    }

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        OwnedValue inner;
        int32_t element_type = element_type_;
        if (ctx.has_input(0)) {
            inner = copy_input(ctx, 0);
            element_type = h.value_element_type(inner.get());
        }
        TessValue* optional = nullptr;
        values::check(h, h.value_create_optional(element_type, inner.get(), &optional), "Optional");
        (void)inner.release();
        ctx.set_output_value(0, optional);
    }

private:
    int32_t element_type_ = TESS_ELEMENT_UNDEFINED;
};

class OptionalHasElementKernel final : public Kernel {
public:
    explicit OptionalHasElementKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        bool has = false;
        switch (input_kind(ctx, 0)) {
            case TESS_VALUE_UNKNOWN: break;
            case TESS_VALUE_OPTIONAL: has = ctx.host().optional_has_value(ctx.input_value(0)) != 0; break;
            default: has = true; break;  // since opset 18 a plain tensor or sequence counts as present
        }
        *ctx.output(0, TESS_ELEMENT_BOOL, Shape{}).ptr<bool>() = has;
    }
};

class OptionalGetElementKernel final : public Kernel {
public:
    explicit OptionalGetElementKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        switch (input_kind(ctx, 0)) {
            case TESS_VALUE_TENSOR: ctx.alias_output(0, 0, ctx.input(0).shape); return;
            case TESS_VALUE_SEQUENCE: ctx.set_output_value(0, values::clone(h, ctx.input_value(0)).release()); return;
            case TESS_VALUE_OPTIONAL: break;
            default: throw KernelError("OptionalGetElement: the input is missing");
        }
        const TessValue* optional = ctx.input_value(0);
        if (!h.optional_has_value(optional)) throw KernelError("OptionalGetElement: the optional is empty");
        const TessValue* inner = h.optional_value(optional);
        if (h.value_kind(inner) != TESS_VALUE_TENSOR) {
            ctx.set_output_value(0, values::clone(h, inner).release());
            return;
        }
        Tensor& output = ctx.output(0, h.value_element_type(inner), values::tensor_shape(h, inner));
        values::copy_into(h, inner, output);
    }
};

}  // namespace

void register_sequence_kernels(KernelRegistry& registry) {
    const auto add = [&](const char* op, KernelFactory factory) {
        registry.add({"", op, 11, 0, {}, KernelMemory::Normal, std::move(factory)});
    };
    add("SequenceEmpty", make_factory<SequenceEmptyKernel>());
    add("SequenceConstruct", make_factory<SequenceConstructKernel>());
    add("SequenceAt", make_factory<SequenceAtKernel>());
    add("SequenceInsert", make_factory<SequenceInsertKernel>());
    add("SequenceErase", make_factory<SequenceEraseKernel>());
    add("SequenceLength", make_factory<SequenceLengthKernel>());
    add("SplitToSequence", make_factory<SplitToSequenceKernel>());
    add("ConcatFromSequence", make_factory<ConcatFromSequenceKernel>());
    registry.add({"", "Optional", 15, 0, {}, KernelMemory::Normal, make_factory<OptionalKernel>()});
    registry.add({"", "OptionalHasElement", 15, 0, {}, KernelMemory::Normal, make_factory<OptionalHasElementKernel>()});
    registry.add({"", "OptionalGetElement", 15, 0, {}, KernelMemory::Normal, make_factory<OptionalGetElementKernel>()});
}

}  // namespace tessera::cpu
