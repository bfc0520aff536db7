// CPU provider: tensor manipulation operators.  Data-movement kernels (Transpose, Concat, Split, Slice, Gather*,
// Scatter*, Pad, Tile, Expand, DepthToSpace, SpaceToDepth, Trilu, OneHot) work on element bytes through
// util/data_movement.h, so one code path serves every element type including strings and packed types.  Cast and
// CastLike convert through util/element_convert.h; TopK, CumSum and NonZero dispatch on value types.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "host.h"
#include "kernels/all_kernels.h"
#include "util/cpu_isa.h"
#include "util/axes.h"
#include "util/broadcast.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/type_list.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

using movement::contiguous_strides;
using movement::copy_strided;
using movement::move_elements;
using movement::MoveBuffers;
using movement::product;
using movement::read_integers;
using movement::with_word;

// Output of `input` viewed with `view_shape` (same element count, contiguous) and permuted by `perm`.
void copy_permuted(const Tensor& input, Tensor& output, const Shape& view_shape, const std::vector<int64_t>& perm,
                   KernelContext& ctx) {
    const std::vector<int64_t> view_strides = contiguous_strides(view_shape);
    Shape shape(perm.size());
    std::vector<int64_t> strides(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
        shape[i] = view_shape[size_t(perm[i])];
        strides[i] = view_strides[size_t(perm[i])];
    }
    move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
        copy_strided(b.outputs[0], b.inputs[0], b.element_size, shape, strides, ctx.pool());
    });
}

std::vector<int64_t> read_shape_input(const Tensor& tensor, std::string_view what) {
    if (tensor.rank() != 1)
        throw KernelError(std::string(what) + " must be a 1-D tensor, got " + shape_string(tensor.shape));
    return read_integers(tensor, what);
}

// Validates indices against a dimension and maps negative ones (ONNX allows [-dim, dim)).
std::vector<int64_t> normalized_indices(const Tensor& indices, int64_t dim, std::string_view op) {
    std::vector<int64_t> result = read_integers(indices, op);
    for (int64_t& index : result) {
        if (index < -dim || index >= dim)
            throw KernelError(std::string(op) + ": index " + std::to_string(index) +
                              " is out of range for a dimension of " + std::to_string(dim));
        if (index < 0) index += dim;
    }
    return result;
}

// ---- Transpose ---------------------------------------------------------------------------------------------------

class TransposeKernel final : public Kernel {
public:
    explicit TransposeKernel(const NodeInfo& info) : perm_(info.attr_ints("perm")) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const size_t rank = input.rank();
        std::vector<int64_t> perm = perm_;
        if (perm.empty()) {
            perm.resize(rank);
            std::iota(perm.rbegin(), perm.rend(), 0);
        }
        if (perm.size() != rank)
            throw KernelError("Transpose: perm has " + std::to_string(perm.size()) + " entries for rank " +
                              std::to_string(rank));
        std::vector<bool> seen(rank, false);
        for (int64_t p : perm) {
            if (p < 0 || p >= int64_t(rank) || seen[size_t(p)])
                throw KernelError("Transpose: perm is not a permutation");
            seen[size_t(p)] = true;
        }
        Shape shape(rank);
        for (size_t i = 0; i < rank; ++i) shape[i] = input.shape[size_t(perm[i])];
        // Moving only size-1 dims keeps the element order: a free reshape.
        int64_t previous = -1;
        bool order_kept = true;
        for (int64_t p : perm) {
            if (input.shape[size_t(p)] == 1) continue;
            order_kept = order_kept && p > previous;
            previous = p;
        }
        if (order_kept) {
            ctx.alias_output(0, 0, shape);
            return;
        }
        Tensor& output = ctx.output(0, input.type, shape);
        copy_permuted(input, output, input.shape, perm, ctx);
    }

private:
    std::vector<int64_t> perm_;
};

// ---- Concat / Split ----------------------------------------------------------------------------------------------

class ConcatKernel final : public Kernel {
public:
    explicit ConcatKernel(const NodeInfo& info)
        : axis_(info.opset() < 4 ? info.attr_int("axis", 1) : info.attr_int("axis")) {}

    void compute(KernelContext& ctx) const override {
        std::vector<const Tensor*> inputs;
        for (size_t i = 0; i < ctx.input_count(); ++i)
            if (ctx.has_input(i)) inputs.push_back(&ctx.input(i));
        if (inputs.empty()) throw KernelError("Concat: no inputs");
        const Shape& first = inputs[0]->shape;
        const size_t axis = normalize_axis("Concat", axis_, first.size());
        Shape shape = first;
        shape[axis] = 0;
        for (const Tensor* t : inputs) {
            bool compatible = t->rank() == first.size() && t->type == inputs[0]->type;
            for (size_t d = 0; compatible && d < first.size(); ++d) compatible = d == axis || t->shape[d] == first[d];
            if (!compatible)
                throw KernelError("Concat: input " + shape_string(t->shape) + " does not match " + shape_string(first) +
                                  " outside axis " + std::to_string(axis));
            shape[axis] += t->shape[axis];
        }
        Tensor& output = ctx.output(0, inputs[0]->type, shape);
        const int64_t outer = product(first, 0, axis);
        const int64_t inner = product(first, axis + 1, first.size());
        Tensor* outputs[] = {&output};
        move_elements(ctx.host(), inputs, outputs, [&](const MoveBuffers& b) {
            std::vector<int64_t> part_bytes;
            for (const Tensor* t : inputs) part_bytes.push_back(t->shape[axis] * inner * int64_t(b.element_size));
            movement::concat_rows(b.outputs[0], b.inputs, part_bytes, outer, ctx.pool());
        });
    }

private:
    int64_t axis_;
};

class SplitKernel final : public Kernel {
public:
    explicit SplitKernel(const NodeInfo& info)
        : opset_(info.opset()), axis_(info.attr_int("axis", 0)), num_outputs_(info.attr_int("num_outputs", 0)) {
        if (opset_ < 13 && info.has_attr("split")) split_ = info.attr_ints("split");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const size_t axis = normalize_axis("Split", axis_, input.rank());
        const int64_t dim = input.shape[axis];
        const int64_t count = int64_t(ctx.output_count());
        std::vector<int64_t> sizes;
        if (split_) {
            sizes = *split_;
        } else if ((opset_ == 1 || opset_ >= 13) && ctx.has_input(1)) {
            sizes = read_integers(ctx.input(1), "Split split");
        } else if (opset_ >= 18 && num_outputs_ > 0) {
            if (num_outputs_ != count) throw KernelError("Split: num_outputs does not match the node's outputs");
            const int64_t chunk = (dim + count - 1) / count;
            for (int64_t k = 0; k < count; ++k) sizes.push_back(std::clamp<int64_t>(dim - k * chunk, 0, chunk));
        } else {
            if (dim % count != 0)
                throw KernelError("Split: dimension " + std::to_string(dim) + " does not split evenly into " +
                                  std::to_string(count) + " outputs");
            sizes.assign(size_t(count), dim / count);
        }
        if (int64_t(sizes.size()) != count)
            throw KernelError("Split: split has " + std::to_string(sizes.size()) + " entries for " +
                              std::to_string(count) + " outputs");
        if (std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; }) ||
            std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != dim)
            throw KernelError("Split: sizes do not add up to dimension " + std::to_string(dim));
        split_tensor(ctx, input, axis, sizes);
    }

    // Every wanted output k receives part k (sizes[k] along `axis`).
    static void split_tensor(KernelContext& ctx, const Tensor& input, size_t axis, const std::vector<int64_t>& sizes) {
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        std::vector<Tensor*> outputs;
        for (size_t k = 0; k < sizes.size(); ++k) {
            if (!ctx.output_wanted(k)) continue;
            Shape shape = input.shape;
            shape[axis] = sizes[k];
            outputs.push_back(&ctx.output(k, input.type, shape));
        }
        const Tensor* inputs[] = {&input};
        move_elements(ctx.host(), inputs, outputs, [&](const MoveBuffers& b) {
            std::vector<std::byte*> dsts;
            std::vector<int64_t> part_bytes;
            size_t next = 0;
            for (size_t k = 0; k < sizes.size(); ++k) {
                dsts.push_back(ctx.output_wanted(k) ? b.outputs[next++] : nullptr);
                part_bytes.push_back(sizes[k] * inner * int64_t(b.element_size));
            }
            movement::split_rows(b.inputs[0], dsts, part_bytes, outer, ctx.pool());
        });
    }

private:
    int64_t opset_;
    int64_t axis_;
    int64_t num_outputs_;
    std::optional<std::vector<int64_t>> split_;
};

// ---- Slice -------------------------------------------------------------------------------------------------------

class SliceKernel final : public Kernel {
public:
    explicit SliceKernel(const NodeInfo& info) : from_attributes_(info.opset() < 10) {
        if (from_attributes_) {
            starts_ = info.attr_ints("starts");
            ends_ = info.attr_ints("ends");
            axes_ = info.attr_ints("axes");
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
        if (!from_attributes_) {
            starts = read_shape_input(ctx.input(1), "Slice starts");
            ends = read_shape_input(ctx.input(2), "Slice ends");
            if (ctx.has_input(3)) axes = read_shape_input(ctx.input(3), "Slice axes");
            if (ctx.has_input(4)) steps = read_shape_input(ctx.input(4), "Slice steps");
        }
        if (axes.empty()) {
            axes.resize(starts.size());
            std::iota(axes.begin(), axes.end(), 0);
        }
        if (steps.empty()) steps.assign(starts.size(), 1);
        if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
            throw KernelError("Slice: starts, ends, axes and steps must have the same length");

        const size_t rank = input.rank();
        const std::vector<int64_t> input_strides = contiguous_strides(input.shape);
        Shape shape = input.shape;
        std::vector<int64_t> strides = input_strides;
        int64_t offset = 0;
        std::vector<bool> seen(rank, false);
        for (size_t i = 0; i < axes.size(); ++i) {
            const size_t axis = normalize_axis("Slice", axes[i], rank);
            if (seen[axis]) throw KernelError("Slice: axis " + std::to_string(axes[i]) + " appears twice");
            seen[axis] = true;
            const int64_t dim = input.shape[axis];
            const int64_t step = steps[i];
            if (step == 0) throw KernelError("Slice: step must not be 0");
            int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
            int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
            int64_t count = 0;
            if (dim > 0 && step > 0) {
                start = std::clamp<int64_t>(start, 0, dim);
                end = std::clamp<int64_t>(end, 0, dim);
                count = end > start ? (end - start - 1) / step + 1 : 0;
            } else if (dim > 0) {
                start = std::clamp<int64_t>(start, 0, dim - 1);
                end = std::clamp<int64_t>(end, -1, dim - 1);
                count = start > end ? (start - end - 1) / -step + 1 : 0;
            }
            shape[axis] = count;
            if (count > 0) offset += start * input_strides[axis];
            strides[axis] = input_strides[axis] * step;
        }
        Tensor& output = ctx.output(0, input.type, shape);
        if (output.size() == 0) return;
        move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
            copy_strided(b.outputs[0], b.inputs[0] + offset * int64_t(b.element_size), b.element_size, shape, strides,
                         ctx.pool());
        });
    }

private:
    bool from_attributes_;
    std::vector<int64_t> starts_, ends_, axes_;
};

// ---- Gather family -----------------------------------------------------------------------------------------------

class GatherKernel final : public Kernel {
public:
    explicit GatherKernel(const NodeInfo& info) : axis_(info.attr_int("axis", 0)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& data = ctx.input(0);
        const Tensor& indices_tensor = ctx.input(1);
        const size_t axis = normalize_axis("Gather", axis_, data.rank());
        const int64_t dim = data.shape[axis];
        const std::vector<int64_t> indices = normalized_indices(indices_tensor, dim, "Gather");
        Shape shape(data.shape.begin(), data.shape.begin() + int64_t(axis));
        shape.insert(shape.end(), indices_tensor.shape.begin(), indices_tensor.shape.end());
        shape.insert(shape.end(), data.shape.begin() + int64_t(axis) + 1, data.shape.end());
        Tensor& output = ctx.output(0, data.type, shape);
        const int64_t outer = product(data.shape, 0, axis);
        const int64_t inner = product(data.shape, axis + 1, data.rank());
        const int64_t n = int64_t(indices.size());
        if (output.size() == 0) return;
        move_elements(ctx.host(), data, output, [&](const MoveBuffers& b) {
            const size_t block = size_t(inner) * b.element_size;
            with_word(b.element_size, [&]<typename W>() {
                const W* in = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                movement::parallel_range(ctx.pool(), outer * n, int64_t(block), [&](int64_t begin, int64_t end) {
                    for (int64_t unit = begin; unit < end; ++unit) {
                        const int64_t o = unit / n;
                        const W* src = in + (o * dim + indices[size_t(unit % n)]) * inner;
                        if (inner == 1)
                            out[unit] = *src;
                        else
                            std::memcpy(out + unit * inner, src, block);
                    }
                });
            });
        });
    }

private:
    int64_t axis_;
};

class GatherElementsKernel final : public Kernel {
public:
    explicit GatherElementsKernel(const NodeInfo& info) : axis_(info.attr_int("axis", 0)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& data = ctx.input(0);
        const Tensor& indices_tensor = ctx.input(1);
        const size_t rank = data.rank();
        if (indices_tensor.rank() != rank)
            throw KernelError("GatherElements: data and indices must have the same rank");
        const size_t axis = normalize_axis("GatherElements", axis_, rank);
        for (size_t d = 0; d < rank; ++d)
            if (d != axis && indices_tensor.shape[d] > data.shape[d])
                throw KernelError("GatherElements: indices " + shape_string(indices_tensor.shape) + " exceed data " +
                                  shape_string(data.shape));
        const std::vector<int64_t> indices = normalized_indices(indices_tensor, data.shape[axis], "GatherElements");
        Tensor& output = ctx.output(0, data.type, indices_tensor.shape);
        if (output.size() == 0) return;
        // Walk the output with the data strides, except along `axis`, where the index picks the element.
        std::vector<int64_t> strides = contiguous_strides(data.shape);
        const int64_t axis_stride = strides[axis];
        strides[axis] = 0;
        const Shape& shape = indices_tensor.shape;
        const int64_t inner = shape.back();
        const int64_t inner_stride = strides.back();
        const int64_t rows = output.size() / inner;
        move_elements(ctx.host(), data, output, [&](const MoveBuffers& b) {
            with_word(b.element_size, [&]<typename W>() {
                const W* in = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                movement::parallel_range(ctx.pool(), rows, inner * int64_t(sizeof(W)), [&](int64_t begin, int64_t end) {
                    movement::Odometer at(std::span<const int64_t>(shape.data(), rank - 1),
                                          std::span<const int64_t>(strides.data(), rank - 1), begin);
                    for (int64_t row = begin; row < end; ++row, at.next())
                        for (int64_t j = 0; j < inner; ++j) {
                            const int64_t k = row * inner + j;
                            out[k] = in[at.offset() + j * inner_stride + indices[size_t(k)] * axis_stride];
                        }
                });
            });
        });
    }

private:
    int64_t axis_;
};

// Element offsets (into data) of the slices an index tuple tensor [..., k] addresses, batch by batch.
struct IndexedSlices {
    std::vector<int64_t> offsets;  // one per index tuple
    int64_t slice_size = 1;        // elements per slice
    Shape tuple_shape;             // indices.shape[:-1]
};

IndexedSlices resolve_index_tuples(const Shape& data_shape, const Tensor& indices_tensor, int64_t batch_dims,
                                   std::string_view op) {
    const size_t q = indices_tensor.rank();
    const size_t r = data_shape.size();
    if (q < 1) throw KernelError(std::string(op) + ": indices must have rank >= 1");
    const int64_t k = indices_tensor.shape.back();
    if (batch_dims < 0 || size_t(batch_dims) >= std::min(q, r + 1) || k < 1 || size_t(batch_dims + k) > r)
        throw KernelError(std::string(op) + ": indices " + shape_string(indices_tensor.shape) + " do not fit data " +
                          shape_string(data_shape));
    const size_t b = size_t(batch_dims);
    for (size_t d = 0; d < b; ++d)
        if (indices_tensor.shape[d] != data_shape[d]) throw KernelError(std::string(op) + ": batch dimensions differ");
    const std::vector<int64_t> raw = read_integers(indices_tensor, op);
    const std::vector<int64_t> strides = contiguous_strides(data_shape);
    IndexedSlices result;
    result.tuple_shape.assign(indices_tensor.shape.begin(), indices_tensor.shape.end() - 1);
    result.slice_size = product(data_shape, b + size_t(k), r);
    const int64_t tuples = shape_size(result.tuple_shape);
    const int64_t per_batch = product(indices_tensor.shape, b, q - 1);
    const int64_t batch_stride = product(data_shape, b, r);
    result.offsets.resize(size_t(tuples));
    for (int64_t t = 0; t < tuples; ++t) {
        int64_t offset = (per_batch ? t / per_batch : 0) * batch_stride;
        for (int64_t j = 0; j < k; ++j) {
            const int64_t dim = data_shape[b + size_t(j)];
            int64_t index = raw[size_t(t * k + j)];
            if (index < -dim || index >= dim)
                throw KernelError(std::string(op) + ": index " + std::to_string(index) +
                                  " is out of range for a dimension of " + std::to_string(dim));
            if (index < 0) index += dim;
            offset += index * strides[b + size_t(j)];
        }
        result.offsets[size_t(t)] = offset;
    }
    return result;
}

class GatherNDKernel final : public Kernel {
public:
    explicit GatherNDKernel(const NodeInfo& info) : batch_dims_(info.attr_int("batch_dims", 0)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const IndexedSlices slices = resolve_index_tuples(data.shape, indices, batch_dims_, "GatherND");
        Shape shape = slices.tuple_shape;
        shape.insert(shape.end(), data.shape.begin() + batch_dims_ + indices.shape.back(), data.shape.end());
        Tensor& output = ctx.output(0, data.type, shape);
        if (output.size() == 0) return;
        move_elements(ctx.host(), data, output, [&](const MoveBuffers& b) {
            const size_t block = size_t(slices.slice_size) * b.element_size;
            movement::parallel_range(
                ctx.pool(), int64_t(slices.offsets.size()), int64_t(block), [&](int64_t begin, int64_t end) {
                    for (int64_t t = begin; t < end; ++t)
                        std::memcpy(b.outputs[0] + size_t(t) * block,
                                    b.inputs[0] + size_t(slices.offsets[size_t(t)]) * b.element_size, block);
                });
        });
    }

private:
    int64_t batch_dims_;
};

// ---- Scatter family ----------------------------------------------------------------------------------------------

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parse_reduction(const NodeInfo& info) {
    const std::string name = info.attr_string("reduction", "none");
    if (name == "none") return Reduction::None;
    if (name == "add") return Reduction::Add;
    if (name == "mul") return Reduction::Mul;
    if (name == "max") return Reduction::Max;
    if (name == "min") return Reduction::Min;
    throw KernelError(std::string(info.op_type()) + ": unknown reduction '" + name + "'");
}

// Applies updates to `output` (already a copy of data): element update u goes to element destination(u), slice by
// slice of `slice` elements.  Runs serially: repeated indices must combine in order.

// Both are read element by element at data's size: the registry lists the same types for both, but a model may
// bind two different ones.
void check_updates_type(const char* op, const Tensor& data, const Tensor& updates) {
    if (updates.type != data.type)
        throw KernelError(std::string(op) + ": updates are " + element_type_name(updates.type) + " but data is " +
                          element_type_name(data.type));
}

template <typename Destination> void scatter_into(KernelContext& ctx, const Tensor& data, const Tensor& updates,
                                                  Tensor& output, Reduction reduction, int64_t slice, int64_t slices,
                                                  Destination destination) {
    if (reduction == Reduction::None) {
        const Tensor* inputs[] = {&data, &updates};
        Tensor* outputs[] = {&output};
        move_elements(ctx.host(), inputs, outputs, [&](const MoveBuffers& b) {
            const size_t es = b.element_size;
            if (b.outputs[0] != b.inputs[0])  // else updating in place
                movement::parallel_memcpy(ctx.pool(), b.outputs[0], b.inputs[0], size_t(data.size()) * es);
            for (int64_t s = 0; s < slices; ++s)
                std::memcpy(b.outputs[0] + size_t(destination(s)) * es, b.inputs[1] + size_t(s * slice) * es,
                            size_t(slice) * es);
        });
        return;
    }
    dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, fp::Half,
             fp::BFloat16>(data.type, [&]<typename T>() {
        using Compute = std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
        if (data.size() > 0 && output.data != data.data) std::memcpy(output.data, data.data, data.byte_size());
        T* out = output.ptr<T>();
        const T* upd = updates.ptr<T>();
        for (int64_t s = 0; s < slices; ++s) {
            T* dst = out + destination(s);
            for (int64_t j = 0; j < slice; ++j) {
                const Compute a = convert::convert_value<Compute>(dst[j]);
                const Compute u = convert::convert_value<Compute>(upd[s * slice + j]);
                Compute r = a;
                switch (reduction) {
                    case Reduction::Add: r = Compute(a + u); break;
                    case Reduction::Mul: r = Compute(a * u); break;
                    case Reduction::Max: r = std::max(a, u); break;
                    case Reduction::Min: r = std::min(a, u); break;
                    case Reduction::None: r = u; break;
                }
                dst[j] = convert::convert_value<T>(r);
            }
        }
    });
}

class ScatterElementsKernel final : public Kernel {
public:
    explicit ScatterElementsKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", 0)), reduction_(parse_reduction(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& data = ctx.input(0);
        const Tensor& indices_tensor = ctx.input(1);
        const Tensor& updates = ctx.input(2);
        const size_t rank = data.rank();
        check_updates_type("ScatterElements", data, updates);
        if (indices_tensor.shape != updates.shape || indices_tensor.rank() != rank)
            throw KernelError("ScatterElements: indices and updates must have one shape of data's rank");
        const size_t axis = normalize_axis("ScatterElements", axis_, rank);
        for (size_t d = 0; d < rank; ++d)
            if (indices_tensor.shape[d] > data.shape[d] && d != axis)
                throw KernelError("ScatterElements: indices " + shape_string(indices_tensor.shape) + " exceed data " +
                                  shape_string(data.shape));
        const std::vector<int64_t> indices = normalized_indices(indices_tensor, data.shape[axis], "ScatterElements");
        Tensor& output = ctx.output(0, data.type, data.shape);
        // Destination offset of each update element: its own coordinates in data, the index along `axis`.
        std::vector<int64_t> destinations(indices.size());
        const std::vector<int64_t> strides = contiguous_strides(data.shape);
        std::vector<int64_t> walk_strides = strides;
        walk_strides[axis] = 0;
        if (!destinations.empty()) {
            movement::Odometer at(indices_tensor.shape, walk_strides, 0);
            for (size_t u = 0; u < destinations.size(); ++u, at.next())
                destinations[u] = at.offset() + indices[u] * strides[axis];
        }
        scatter_into(ctx, data, updates, output, reduction_, 1, int64_t(destinations.size()),
                     [&](int64_t u) { return destinations[size_t(u)]; });
    }

private:
    int64_t axis_;
    Reduction reduction_;
};

class ScatterNDKernel final : public Kernel {
public:
    explicit ScatterNDKernel(const NodeInfo& info) : reduction_(parse_reduction(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const Tensor& updates = ctx.input(2);
        check_updates_type("ScatterND", data, updates);
        const IndexedSlices slices = resolve_index_tuples(data.shape, indices, 0, "ScatterND");
        Shape expected = slices.tuple_shape;
        expected.insert(expected.end(), data.shape.begin() + indices.shape.back(), data.shape.end());
        if (updates.shape != expected)
            throw KernelError("ScatterND: updates shape " + shape_string(updates.shape) + " should be " +
                              shape_string(expected));
        Tensor& output = ctx.output(0, data.type, data.shape);
        scatter_into(ctx, data, updates, output, reduction_, slices.slice_size, int64_t(slices.offsets.size()),
                     [&](int64_t s) { return slices.offsets[size_t(s)]; });
    }

private:
    Reduction reduction_;
};

// ---- Pad ---------------------------------------------------------------------------------------------------------

enum class PadMode { Constant, Reflect, Edge, Wrap };

class PadKernel final : public Kernel {
public:
    explicit PadKernel(const NodeInfo& info) : opset_(info.opset()), value_(info.attr_float("value", 0.0f)) {
        const std::string mode = info.attr_string("mode", "constant");
        if (mode == "constant")
            mode_ = PadMode::Constant;
        else if (mode == "reflect")
            mode_ = PadMode::Reflect;
        else if (mode == "edge")
            mode_ = PadMode::Edge;
        else if (mode == "wrap" && opset_ >= 19)
            mode_ = PadMode::Wrap;
        else
            throw KernelError("Pad: unsupported mode '" + mode + "'");
        if (opset_ < 11) pads_ = info.attr_ints(opset_ < 2 ? "paddings" : "pads");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const size_t rank = input.rank();
        std::vector<int64_t> begins(rank, 0), ends(rank, 0);
        if (opset_ < 11) {
            if (pads_.size() != 2 * rank) throw KernelError("Pad: pads must have 2 * rank entries");
            std::copy(pads_.begin(), pads_.begin() + int64_t(rank), begins.begin());
            std::copy(pads_.begin() + int64_t(rank), pads_.end(), ends.begin());
        } else {
            const std::vector<int64_t> pads = read_integers(ctx.input(1), "Pad pads");
            std::vector<int64_t> axes;
            if (ctx.has_input(3)) {
                axes = read_integers(ctx.input(3), "Pad axes");
            } else {
                axes.resize(rank);
                std::iota(axes.begin(), axes.end(), 0);
            }
            if (pads.size() != 2 * axes.size()) throw KernelError("Pad: pads must have 2 entries per padded axis");
            for (size_t i = 0; i < axes.size(); ++i) {
                const size_t axis = normalize_axis("Pad", axes[i], rank);
                begins[axis] = pads[i];
                ends[axis] = pads[axes.size() + i];
            }
        }

        // Per output dim: the source index of every position, -1 for the padding value.
        Shape shape(rank);
        std::vector<std::vector<int64_t>> maps(rank);
        for (size_t d = 0; d < rank; ++d) {
            const int64_t dim = input.shape[d];
            shape[d] = dim + begins[d] + ends[d];
            if (shape[d] < 0) throw KernelError("Pad: pads remove more than dimension " + std::to_string(d) + " holds");
            maps[d].resize(size_t(shape[d]));
            for (int64_t o = 0; o < shape[d]; ++o) maps[d][size_t(o)] = source_index(o - begins[d], dim);
        }
        Tensor& output = ctx.output(0, input.type, shape);
        if (output.size() == 0) return;

        std::vector<std::byte> value_bytes;
        Tensor value_tensor;
        const Tensor* fill = nullptr;
        if (opset_ < 11 && input.type != TESS_ELEMENT_STRING) {
            value_bytes = std::vector<std::byte>(std::max<size_t>(movement::element_size(input.type), 1));
            if (convert::is_value_type(input.type)) convert::store_number(input.type, value_bytes.data(), 0, value_);
            value_tensor = Tensor{input.type, {}, value_bytes.data(), nullptr};
            fill = &value_tensor;
        } else if (ctx.has_input(2) && ctx.input(2).size() > 0) {
            fill = &ctx.input(2);
            if (fill->type != input.type) throw KernelError("Pad: constant_value must have the data's type");
        }

        move_elements(
            ctx.host(), input, output,
            [&](const MoveBuffers& b) { pad(b, input.shape, shape, begins, maps, ctx.pool()); }, fill);
    }

private:
    int64_t source_index(int64_t i, int64_t dim) const {
        if (i >= 0 && i < dim) return i;
        if (mode_ == PadMode::Constant) return -1;
        if (dim == 0) throw KernelError("Pad: cannot pad an empty dimension in this mode");
        switch (mode_) {
            case PadMode::Edge: return std::clamp<int64_t>(i, 0, dim - 1);
            case PadMode::Wrap: return ((i % dim) + dim) % dim;
            case PadMode::Reflect: {
                if (dim == 1) return 0;
                const int64_t period = 2 * (dim - 1);
                int64_t m = ((i % period) + period) % period;
                return m < dim ? m : period - m;
            }
            case PadMode::Constant: break;
        }
        return -1;
    }

    static void pad(const MoveBuffers& b, const Shape& in_shape, const Shape& shape, const std::vector<int64_t>& begins,
                    const std::vector<std::vector<int64_t>>& maps, ThreadPool& pool) {
        const size_t rank = shape.size();
        const size_t es = b.element_size;
        if (rank == 0) {
            std::memcpy(b.outputs[0], b.inputs[0], es);
            return;
        }
        const std::vector<int64_t> in_strides = contiguous_strides(in_shape);
        const int64_t inner = shape.back();
        const int64_t rows = shape_size(shape) / inner;
        const int64_t in_inner = in_shape.back();
        // Positions [lo, hi) of the last dim copy the source row unchanged.
        const int64_t lo = std::clamp<int64_t>(begins.back(), 0, inner);
        const int64_t hi = std::clamp<int64_t>(begins.back() + in_inner, lo, inner);
        with_word(es, [&]<typename W>() {
            const W* in = reinterpret_cast<const W*>(b.inputs[0]);
            W* out = reinterpret_cast<W*>(b.outputs[0]);
            W fill;
            std::memcpy(&fill, b.fill, sizeof(W));
            const std::vector<int64_t>& last_map = maps.back();
            movement::parallel_range(pool, rows, inner * int64_t(es), [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                    W* dst = out + row * inner;
                    int64_t offset = 0;
                    bool padding_row = false;
                    for (size_t d = rank - 1, rest = size_t(row); d-- > 0;) {
                        const int64_t source = maps[d][rest % size_t(shape[d])];
                        rest /= size_t(shape[d]);
                        if (source < 0) padding_row = true;
                        offset += source * in_strides[d];
                    }
                    if (padding_row) {
                        std::fill(dst, dst + inner, fill);
                        continue;
                    }
                    const W* src = in + offset;
                    for (int64_t o = 0; o < lo; ++o) dst[o] = last_map[size_t(o)] < 0 ? fill : src[last_map[size_t(o)]];
                    if (hi > lo) std::memcpy(dst + lo, src + (lo - begins.back()), size_t(hi - lo) * sizeof(W));
                    for (int64_t o = hi; o < inner; ++o)
                        dst[o] = last_map[size_t(o)] < 0 ? fill : src[last_map[size_t(o)]];
                }
            });
        });
    }

    int64_t opset_;
    float value_;
    PadMode mode_ = PadMode::Constant;
    std::vector<int64_t> pads_;
};

// ---- Tile / Expand -----------------------------------------------------------------------------------------------

class TileKernel final : public Kernel {
public:
    explicit TileKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const std::vector<int64_t> repeats = read_shape_input(ctx.input(1), "Tile repeats");
        const size_t rank = input.rank();
        if (repeats.size() != rank) throw KernelError("Tile: repeats must have one entry per input dimension");
        // Tiling is a broadcast copy of the input viewed as [1, d0, 1, d1, ...] to [r0, d0, r1, d1, ...].
        const std::vector<int64_t> strides = contiguous_strides(input.shape);
        Shape shape(rank), view_shape, view_strides;
        for (size_t d = 0; d < rank; ++d) {
            if (repeats[d] < 0) throw KernelError("Tile: repeats must not be negative");
            if (__builtin_mul_overflow(input.shape[d], repeats[d], &shape[d]))
                throw KernelError("dimension " + std::to_string(d) + " of the output (" +
                                  std::to_string(input.shape[d]) + " x " + std::to_string(repeats[d]) +
                                  ") does not fit in 64 bits");
            view_shape.insert(view_shape.end(), {repeats[d], input.shape[d]});
            view_strides.insert(view_strides.end(), {0, strides[d]});
        }
        Tensor& output = ctx.output(0, input.type, shape);
        if (output.size() == 0) return;
        move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
            copy_strided(b.outputs[0], b.inputs[0], b.element_size, view_shape, view_strides, ctx.pool());
        });
    }
};

class ExpandKernel final : public Kernel {
public:
    explicit ExpandKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const Shape requested = read_shape_input(ctx.input(1), "Expand shape");
        const Shape shape = broadcast_shapes("Expand", input.shape, requested);
        if (shape == input.shape) {
            ctx.alias_output(0, 0, shape);
            return;
        }
        // Right-aligned input strides, 0 where the input stretches.
        const std::vector<int64_t> input_strides = contiguous_strides(input.shape);
        std::vector<int64_t> strides(shape.size(), 0);
        const size_t lead = shape.size() - input.rank();
        for (size_t d = 0; d < input.rank(); ++d) strides[lead + d] = input.shape[d] == 1 ? 0 : input_strides[d];
        Tensor& output = ctx.output(0, input.type, shape);
        if (output.size() == 0) return;
        move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
            copy_strided(b.outputs[0], b.inputs[0], b.element_size, shape, strides, ctx.pool());
        });
    }
};

// ---- Cast / CastLike ---------------------------------------------------------------------------------------------

int32_t type_from_name(std::string name) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    static const std::pair<const char*, int32_t> kNames[] = {
        {"FLOAT", TESS_ELEMENT_FLOAT32},   {"UINT8", TESS_ELEMENT_UINT8},    {"INT8", TESS_ELEMENT_INT8},
        {"UINT16", TESS_ELEMENT_UINT16},   {"INT16", TESS_ELEMENT_INT16},    {"INT32", TESS_ELEMENT_INT32},
        {"INT64", TESS_ELEMENT_INT64},     {"STRING", TESS_ELEMENT_STRING},  {"BOOL", TESS_ELEMENT_BOOL},
        {"FLOAT16", TESS_ELEMENT_FLOAT16}, {"DOUBLE", TESS_ELEMENT_FLOAT64}, {"UINT32", TESS_ELEMENT_UINT32},
        {"UINT64", TESS_ELEMENT_UINT64}};
    for (const auto& [text, type] : kNames)
        if (name == text) return type;
    throw KernelError("Cast: unknown type name '" + name + "'");
}

__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) out[i] = fp::float_to_half(in[i]);
}

__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < n; ++i) out[i] = fp::half_to_float(in[i]);
}

// F16C is part of the Avx2 level (util/cpu_isa.h).
bool has_f16c() { return cpu_allows(CpuIsa::Avx2); }

void cast_tensor(KernelContext& ctx, const Tensor& input, int32_t to, const convert::CastOptions& options) {
    if (input.type == to) {
        ctx.alias_output(0, 0, input.shape);
        return;
    }
    Tensor& output = ctx.output(0, to, input.shape);
    const int64_t n = input.size();
    const TessHostApi& h = ctx.host();
    if (input.type == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < n; ++i) {
            const std::string_view text = values::get_string(h, input.value, size_t(i));
            if (!convert::parse_element(text, to, output.data, i, options))
                throw KernelError("Cast: '" + std::string(text) + "' is not a number");
        }
        return;
    }
    if (to == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < n; ++i)
            values::set_string(h, output.value, size_t(i), convert::format_element(input.type, input.data, i));
        return;
    }
    if (fp::packed_bits(to)) std::memset(output.data, 0, output.byte_size());
    const bool f16c = has_f16c();
    // Blocks are multiples of 4 elements so that packed outputs never share a byte between tasks.
    constexpr int64_t kBlock = 4096;
    movement::parallel_range(ctx.pool(), (n + kBlock - 1) / kBlock, kBlock * 4, [&](int64_t first, int64_t last) {
        const int64_t begin = first * kBlock;
        const int64_t end = std::min(n, last * kBlock);
        if (f16c && input.type == TESS_ELEMENT_FLOAT32 && to == TESS_ELEMENT_FLOAT16)
            float_to_half_f16c(input.ptr<float>() + begin, output.ptr<uint16_t>() + begin, end - begin);
        else if (f16c && input.type == TESS_ELEMENT_FLOAT16 && to == TESS_ELEMENT_FLOAT32)
            half_to_float_f16c(input.ptr<uint16_t>() + begin, output.ptr<float>() + begin, end - begin);
        else
            convert::convert_block(input.type, input.data, to, output.data, begin, end, options);
    });
}

convert::CastOptions cast_options(const NodeInfo& info) {
    convert::CastOptions options;
    options.saturate = info.attr_int("saturate", 1) != 0;
    const std::string mode = info.attr_string("round_mode", "up");
    if (mode == "up")
        options.e8m0_rounding = fp::E8M0Rounding::Up;
    else if (mode == "down")
        options.e8m0_rounding = fp::E8M0Rounding::Down;
    else if (mode == "nearest")
        options.e8m0_rounding = fp::E8M0Rounding::Nearest;
    else
        throw KernelError("Cast: unknown round_mode '" + mode + "'");
    return options;
}

bool castable(int32_t type) {
    return type == TESS_ELEMENT_STRING || convert::is_value_type(type) || convert::is_special_format(type);
}

class CastKernel final : public Kernel {
public:
    explicit CastKernel(const NodeInfo& info) : options_(cast_options(info)) {
        const TessAttributeView* to = info.find("to");
        if (to == nullptr) throw KernelError("Cast: attribute 'to' is required");
        to_ = to->type == TESS_ATTR_STRING ? type_from_name(info.attr_string("to", "")) : int32_t(info.attr_int("to"));
        if (!castable(to_)) throw_unsupported_type("Cast", to_);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (!castable(input.type)) throw_unsupported_type("Cast", input.type);
        cast_tensor(ctx, input, to_, options_);
    }

private:
    int32_t to_ = TESS_ELEMENT_UNDEFINED;
    convert::CastOptions options_;
};

class CastLikeKernel final : public Kernel {
public:
    explicit CastLikeKernel(const NodeInfo& info) : options_(cast_options(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const int32_t to = ctx.input(1).type;
        if (!castable(input.type)) throw_unsupported_type("CastLike", input.type);
        if (!castable(to)) throw_unsupported_type("CastLike", to);
        cast_tensor(ctx, input, to, options_);
    }

private:
    convert::CastOptions options_;
};

// ---- Trilu -------------------------------------------------------------------------------------------------------

class TriluKernel final : public Kernel {
public:
    explicit TriluKernel(const NodeInfo& info) : upper_(info.attr_int("upper", 1) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (input.rank() < 2) throw KernelError("Trilu: input must have rank >= 2");
        int64_t k = 0;
        if (ctx.has_input(1)) {
            const Tensor& k_tensor = ctx.input(1);
            if (k_tensor.size() != 1) throw KernelError("Trilu: k must be a scalar");
            k = read_integers(k_tensor, "Trilu k")[0];
        }
        Tensor& output = ctx.output(0, input.type, input.shape);
        if (output.size() == 0) return;
        const int64_t n = input.shape[input.rank() - 2];
        const int64_t m = input.shape.back();
        const int64_t rows = input.size() / m;
        move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
            with_word(b.element_size, [&]<typename W>() {
                const W* in = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                W zero;
                std::memcpy(&zero, b.fill, sizeof(W));
                movement::parallel_range(ctx.pool(), rows, m * int64_t(sizeof(W)), [&](int64_t begin, int64_t end) {
                    for (int64_t row = begin; row < end; ++row) {
                        const int64_t i = row % n;
                        // Upper keeps columns j >= i + k, lower keeps j <= i + k.
                        const int64_t split = std::clamp<int64_t>(upper_ ? i + k : i + k + 1, 0, m);
                        const W* src = in + row * m;
                        W* dst = out + row * m;
                        const int64_t keep_begin = upper_ ? split : 0, keep_end = upper_ ? m : split;
                        std::fill(dst, dst + keep_begin, zero);
                        std::copy(src + keep_begin, src + keep_end, dst + keep_begin);
                        std::fill(dst + keep_end, dst + m, zero);
                    }
                });
            });
        });
    }

private:
    bool upper_;
};

// ---- DepthToSpace / SpaceToDepth ---------------------------------------------------------------------------------

class DepthToSpaceKernel final : public Kernel {
public:
    explicit DepthToSpaceKernel(const NodeInfo& info)
        : blocksize_(info.attr_int("blocksize")), column_row_depth_(info.attr_string("mode", "DCR") == "CRD") {
        if (blocksize_ < 1) throw KernelError("DepthToSpace: blocksize must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (input.rank() != 4) throw KernelError("DepthToSpace: input must be 4-D");
        const int64_t b = blocksize_, n = input.shape[0], c = input.shape[1], h = input.shape[2], w = input.shape[3];
        if (c % (b * b) != 0) throw KernelError("DepthToSpace: channels are not divisible by blocksize^2");
        const int64_t depth = c / (b * b);
        Tensor& output = ctx.output(0, input.type, Shape{n, depth, h * b, w * b});
        if (output.size() == 0) return;
        if (column_row_depth_)
            copy_permuted(input, output, Shape{n, depth, b, b, h, w}, {0, 1, 4, 2, 5, 3}, ctx);
        else
            copy_permuted(input, output, Shape{n, b, b, depth, h, w}, {0, 3, 4, 1, 5, 2}, ctx);
    }

private:
    int64_t blocksize_;
    bool column_row_depth_;
};

// The inverse of DepthToSpace.  Opset 28 adds its `mode`: DCR puts the block offset before the channel in the output
// depth, CRD after it.
class SpaceToDepthKernel final : public Kernel {
public:
    explicit SpaceToDepthKernel(const NodeInfo& info) : blocksize_(info.attr_int("blocksize")) {
        if (blocksize_ < 1) throw KernelError("SpaceToDepth: blocksize must be positive");
        const std::string mode = info.attr_string("mode", "DCR");
        if (mode != "DCR" && mode != "CRD")
            throw KernelError("SpaceToDepth: mode must be \"DCR\" or \"CRD\", got \"" + mode + "\"");
        column_row_depth_ = mode == "CRD";
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (input.rank() != 4) throw KernelError("SpaceToDepth: input must be 4-D");
        const int64_t b = blocksize_, n = input.shape[0], c = input.shape[1], h = input.shape[2], w = input.shape[3];
        if (h % b != 0 || w % b != 0)
            throw KernelError("SpaceToDepth: height and width must be divisible by blocksize");
        Tensor& output = ctx.output(0, input.type, Shape{n, c * b * b, h / b, w / b});
        if (output.size() == 0) return;
        const Shape view{n, c, h / b, b, w / b, b};
        if (column_row_depth_)
            copy_permuted(input, output, view, {0, 1, 3, 5, 2, 4}, ctx);
        else
            copy_permuted(input, output, view, {0, 3, 5, 1, 2, 4}, ctx);
    }

private:
    int64_t blocksize_;
    bool column_row_depth_ = false;
};

// ---- OneHot ------------------------------------------------------------------------------------------------------

class OneHotKernel final : public Kernel {
public:
    explicit OneHotKernel(const NodeInfo& info) : axis_(info.attr_int("axis", -1)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& indices = ctx.input(0);
        const Tensor& depth_tensor = ctx.input(1);
        const Tensor& values = ctx.input(2);
        if (depth_tensor.size() != 1) throw KernelError("OneHot: depth must be a scalar");
        if (values.size() != 2) throw KernelError("OneHot: values must hold [off_value, on_value]");
        double depth_value = 0;
        convert::load_doubles(depth_tensor.type, depth_tensor.data, 0, 1, &depth_value);
        const int64_t depth = int64_t(depth_value);
        if (depth < 1) throw KernelError("OneHot: depth must be positive");
        const size_t rank = indices.rank() + 1;
        const size_t axis = normalize_axis("OneHot", axis_, rank);
        Shape shape = indices.shape;
        shape.insert(shape.begin() + int64_t(axis), depth);
        Tensor& output = ctx.output(0, values.type, shape);
        if (output.size() == 0) return;
        // Indices of any numeric type; negative ones count from the end, out-of-range ones select nothing.
        std::vector<int64_t> hot(size_t(indices.size()));
        {
            std::vector<double> raw(hot.size());
            convert::load_doubles(indices.type, indices.data, 0, int64_t(raw.size()), raw.data());
            for (size_t i = 0; i < hot.size(); ++i) {
                int64_t index = int64_t(raw[i]);
                if (index < 0) index += depth;
                hot[i] = (index >= 0 && index < depth) ? index : -1;
            }
        }
        const int64_t outer = product(indices.shape, 0, axis);
        const int64_t inner = product(indices.shape, axis, indices.rank());
        move_elements(ctx.host(), values, output, [&](const MoveBuffers& b) {
            with_word(b.element_size, [&]<typename W>() {
                const W* pair = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                std::fill(out, out + output.size(), pair[0]);
                for (int64_t o = 0; o < outer; ++o)
                    for (int64_t i = 0; i < inner; ++i)
                        if (const int64_t d = hot[size_t(o * inner + i)]; d >= 0)
                            out[(o * depth + d) * inner + i] = pair[1];
            });
        });
    }

private:
    int64_t axis_;
};

// ---- NonZero -----------------------------------------------------------------------------------------------------

class NonZeroKernel final : public Kernel {
public:
    explicit NonZeroKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        std::vector<int64_t> positions;
        convert::dispatch_value_type(input.type, [&]<typename T>() {
            const T* data = input.ptr<T>();
            for (int64_t i = 0; i < input.size(); ++i)
                if (convert::convert_value<bool>(data[i])) positions.push_back(i);
        });
        // A scalar reports as a 1-D tensor of one element (numpy's behaviour).
        const Shape shape = input.rank() == 0 ? Shape{1} : input.shape;
        const size_t rank = shape.size();
        const int64_t count = int64_t(positions.size());
        Tensor& output = ctx.output(0, TESS_ELEMENT_INT64, Shape{int64_t(rank), count});
        int64_t* out = output.ptr<int64_t>();
        for (int64_t p = 0; p < count; ++p) {
            int64_t rest = positions[size_t(p)];
            for (size_t d = rank; d-- > 0;) {
                out[int64_t(d) * count + p] = rest % shape[d];
                rest /= shape[d];
            }
        }
    }
};

// ---- TopK --------------------------------------------------------------------------------------------------------

class TopKKernel final : public Kernel {
public:
    explicit TopKKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", -1)), largest_(info.attr_int("largest", 1) != 0) {
        if (info.opset() < 10) k_ = info.attr_int("k");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        int64_t k = k_.value_or(0);
        if (!k_) {
            const Tensor& k_tensor = ctx.input(1);
            if (k_tensor.size() != 1) throw KernelError("TopK: K must hold one value");
            k = read_integers(k_tensor, "TopK K")[0];
        }
        const size_t axis = normalize_axis("TopK", axis_, input.rank());
        const int64_t dim = input.shape[axis];
        if (k < 0 || k > dim)
            throw KernelError("TopK: K " + std::to_string(k) + " is out of range for a dimension of " +
                              std::to_string(dim));
        Shape shape = input.shape;
        shape[axis] = k;
        Tensor& values = ctx.output(0, input.type, shape);
        Tensor& indices = ctx.output(1, TESS_ELEMENT_INT64, shape);
        if (values.size() == 0) return;
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, fp::Half,
                 fp::BFloat16>(input.type, [&]<typename T>() {
            using Key = std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
            const T* in = input.ptr<T>();
            T* out_values = values.ptr<T>();
            int64_t* out_indices = indices.ptr<int64_t>();
            movement::parallel_range(ctx.pool(), outer * inner, dim * 8, [&](int64_t begin, int64_t end) {
                std::vector<std::pair<Key, int64_t>> items(static_cast<size_t>(dim));
                // Ties keep the lower index first.
                const auto before = [this](const std::pair<Key, int64_t>& a, const std::pair<Key, int64_t>& b) {
                    if (a.first != b.first) return largest_ ? a.first > b.first : a.first < b.first;
                    return a.second < b.second;
                };
                for (int64_t slice = begin; slice < end; ++slice) {
                    const int64_t o = slice / inner, i = slice % inner;
                    const T* src = in + o * dim * inner + i;
                    for (int64_t j = 0; j < dim; ++j)
                        items[size_t(j)] = {convert::convert_value<Key>(src[j * inner]), j};
                    std::partial_sort(items.begin(), items.begin() + k, items.end(), before);
                    for (int64_t j = 0; j < k; ++j) {
                        const int64_t at = o * k * inner + j * inner + i;
                        out_values[at] = src[items[size_t(j)].second * inner];
                        out_indices[at] = items[size_t(j)].second;
                    }
                }
            });
        });
    }

private:
    int64_t axis_;
    bool largest_;
    std::optional<int64_t> k_;
};

// ---- CumSum ------------------------------------------------------------------------------------------------------

class CumSumKernel final : public Kernel {
public:
    explicit CumSumKernel(const NodeInfo& info)
        : exclusive_(info.attr_int("exclusive", 0) != 0), reverse_(info.attr_int("reverse", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const Tensor& axis_tensor = ctx.input(1);
        if (axis_tensor.size() != 1) throw KernelError("CumSum: axis must be a scalar");
        const size_t axis = normalize_axis("CumSum", read_integers(axis_tensor, "CumSum axis")[0], input.rank());
        Tensor& output = ctx.output(0, input.type, input.shape);
        if (output.size() == 0) return;
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t dim = input.shape[axis];
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t, fp::Half, fp::BFloat16>(
            input.type, [&]<typename T>() {
                using Sum =
                    std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
                const T* in = input.ptr<T>();
                T* out = output.ptr<T>();
                movement::parallel_range(
                    ctx.pool(), outer, dim * inner * int64_t(sizeof(T)), [&](int64_t begin, int64_t end) {
                        std::vector<Sum> running(static_cast<size_t>(inner));
                        for (int64_t o = begin; o < end; ++o) {
                            std::fill(running.begin(), running.end(), Sum(0));
                            for (int64_t step = 0; step < dim; ++step) {
                                const int64_t a = reverse_ ? dim - 1 - step : step;
                                const T* src = in + (o * dim + a) * inner;
                                T* dst = out + (o * dim + a) * inner;
                                for (int64_t j = 0; j < inner; ++j) {
                                    const Sum x = convert::convert_value<Sum>(src[j]);
                                    // The running sum is rounded to T at every step, as a cumulative sum in T computes
                                    // it.
                                    const T sum = convert::convert_value<T>(Sum(running[size_t(j)] + x));
                                    dst[j] = exclusive_ ? convert::convert_value<T>(running[size_t(j)]) : sum;
                                    running[size_t(j)] = convert::convert_value<Sum>(sum);
                                }
                            }
                        }
                    });
            });
    }

private:
    bool exclusive_;
    bool reverse_;
};

}  // namespace

void register_tensor_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> index_types{TESS_ELEMENT_INT32, TESS_ELEMENT_INT64};
    const std::vector<int32_t> sortable{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT8,
                                        TESS_ELEMENT_INT16,   TESS_ELEMENT_INT32,   TESS_ELEMENT_INT64,
                                        TESS_ELEMENT_UINT8,   TESS_ELEMENT_UINT16,  TESS_ELEMENT_UINT32,
                                        TESS_ELEMENT_UINT64,  TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16};
    const std::vector<int32_t> summable{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT32,
                                        TESS_ELEMENT_INT64,   TESS_ELEMENT_UINT32,  TESS_ELEMENT_UINT64,
                                        TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16};
    const auto add = [&](const char* op, int since, int end, KernelFactory factory,
                         std::vector<std::pair<size_t, std::vector<int32_t>>> types = {},
                         KernelMemory memory = KernelMemory::Normal) {
        registry.add({"", op, since, end, std::move(types), memory, std::move(factory)});
    };
    // Scatter*, Trilu and CumSum read each element before writing it, so they can update their input in place.
    constexpr KernelMemory kInPlace = KernelMemory::InPlaceInput0;
    add("Transpose", 1, 0, make_factory<TransposeKernel>());
    add("Concat", 1, 0, make_factory<ConcatKernel>());
    add("Split", 1, 0, make_factory<SplitKernel>());
    add("Slice", 1, 9, make_factory<SliceKernel>());
    add("Slice", 10, 0, make_factory<SliceKernel>(),
        {{1, index_types}, {2, index_types}, {3, index_types}, {4, index_types}});
    add("Gather", 1, 0, make_factory<GatherKernel>(), {{1, index_types}});
    add("GatherElements", 11, 0, make_factory<GatherElementsKernel>(), {{1, index_types}});
    add("GatherND", 11, 0, make_factory<GatherNDKernel>(), {{1, {TESS_ELEMENT_INT64}}});
    add("Scatter", 9, 10, make_factory<ScatterElementsKernel>(), {{1, index_types}}, kInPlace);
    add("ScatterElements", 11, 0, make_factory<ScatterElementsKernel>(), {{1, index_types}}, kInPlace);
    add("ScatterND", 11, 0, make_factory<ScatterNDKernel>(), {{1, {TESS_ELEMENT_INT64}}}, kInPlace);
    add("Pad", 1, 0, make_factory<PadKernel>());
    add("Tile", 6, 0, make_factory<TileKernel>(), {{1, {TESS_ELEMENT_INT64}}});
    add("Expand", 8, 0, make_factory<ExpandKernel>(), {{1, {TESS_ELEMENT_INT64}}});
    const std::vector<int32_t> castable_types = element_types_where(castable);
    add("Cast", 1, 0, make_factory<CastKernel>(), {{0, castable_types}});
    add("CastLike", 15, 0, make_factory<CastLikeKernel>(), {{0, castable_types}, {1, castable_types}});
    add("Trilu", 14, 0, make_factory<TriluKernel>(), {}, kInPlace);
    add("DepthToSpace", 1, 0, make_factory<DepthToSpaceKernel>());
    add("SpaceToDepth", 1, 0, make_factory<SpaceToDepthKernel>());
    // OneHot reads indices and depth as numbers; NonZero dispatches on the value types.
    const std::vector<int32_t> value_types = element_types_where(convert::is_value_type);
    add("OneHot", 9, 0, make_factory<OneHotKernel>(), {{0, value_types}, {1, value_types}});
    add("NonZero", 9, 0, make_factory<NonZeroKernel>(), {{0, value_types}});
    add("TopK", 1, 0, make_factory<TopKKernel>(), {{0, sortable}});
    add("CumSum", 11, 0, make_factory<CumSumKernel>(), {{0, summable}, {1, index_types}}, kInPlace);
}

}  // namespace tessera::cpu
