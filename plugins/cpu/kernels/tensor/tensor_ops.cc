// CPU provider: tensor data movement.  Transpose, Concat, Split, Slice, Gather*, Scatter*, Pad, Tile, Expand,
// DepthToSpace and SpaceToDepth work on element bytes through util/data_movement.h, so one code path serves every
// element type including strings and packed types.  The operators that read values are in tensor_values.cc.

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/broadcast.h"
#include "util/data_movement.h"
#include "util/element_convert.h"

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

}  // namespace

void register_tensor_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> index_types{TESS_ELEMENT_INT32, TESS_ELEMENT_INT64};
    const auto add = [&](const char* op, int since, int end, KernelFactory factory,
                         std::vector<std::pair<size_t, std::vector<int32_t>>> types = {},
                         KernelMemory memory = KernelMemory::Normal) {
        registry.add({"", op, since, end, std::move(types), memory, std::move(factory)});
    };
    // Scatter* reads each element before writing it, so it can update its input in place.
    constexpr KernelMemory kInPlace = KernelMemory::InPlaceInput0;
    add("Transpose", 1, 0, make_factory<TransposeKernel>());
    add("Concat", 1, 0, make_factory<ConcatKernel>(), {}, KernelMemory::ConcatInPlace);
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
    add("DepthToSpace", 1, 0, make_factory<DepthToSpaceKernel>());
    add("SpaceToDepth", 1, 0, make_factory<SpaceToDepthKernel>());
}

}  // namespace tessera::cpu
