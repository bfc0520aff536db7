// CPU provider: building blocks of the kernels that only move elements (Transpose, Slice, Concat, Gather, Pad,
// sequences, ...).  They work on raw bytes and an element size, so one instantiation serves every fixed-size
// element type; move_elements() extends a byte-level kernel to string tensors and to packed sub-byte types.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/host.h"
#include "runtime/kernel.h"
#include "util/float_formats.h"
#include "util/values.h"

namespace tessera::cpu::movement {

// Bytes of one element for fixed-size types; 0 for strings and packed sub-byte types.
inline size_t element_size(int32_t type) { return fp::packed_bits(type) ? 0 : element_bytes(type, 1); }

// Trivially copyable words of each element size, for copies the compiler turns into single moves.
struct Word128 {
    uint64_t low, high;
};

template <typename Fn> void with_word(size_t element_bytes, Fn&& fn) {
    switch (element_bytes) {
        case 1: fn.template operator()<uint8_t>(); break;
        case 2: fn.template operator()<uint16_t>(); break;
        case 4: fn.template operator()<uint32_t>(); break;
        case 8: fn.template operator()<uint64_t>(); break;
        case 16: fn.template operator()<Word128>(); break;
        default: throw KernelError("unsupported element size " + std::to_string(element_bytes));
    }
}

// Runs fn(begin, end) over [0, n), in parallel when each task gets at least ~32 KiB of work.
template <typename Fn> void parallel_range(ThreadPool& pool, int64_t n, int64_t bytes_per_item, Fn&& fn) {
    if (n <= 0) return;
    constexpr int64_t kBytesPerTask = 32 * 1024;
    const int64_t grain = std::max<int64_t>(1, kBytesPerTask / std::max<int64_t>(1, bytes_per_item));
    if (n <= grain || pool.size() <= 1) {
        fn(int64_t(0), n);
        return;
    }
    pool.parallel_for(n, grain, [&fn](int64_t begin, int64_t end) { fn(begin, end); });
}

inline void parallel_memcpy(ThreadPool& pool, void* dst, const void* src, size_t bytes) {
    constexpr int64_t kChunk = 64 * 1024;
    const int64_t chunks = int64_t((bytes + kChunk - 1) / kChunk);
    parallel_range(pool, chunks, kChunk, [&](int64_t begin, int64_t end) {
        const size_t first = size_t(begin) * kChunk;
        const size_t last = std::min(bytes, size_t(end) * kChunk);
        std::memcpy(static_cast<std::byte*>(dst) + first, static_cast<const std::byte*>(src) + first, last - first);
    });
}

// dst[0, count) = the one element at `value` (es bytes).
inline void fill_elements(std::byte* dst, const std::byte* value, size_t es, int64_t count, ThreadPool& pool) {
    with_word(es, [&]<typename W>() {
        W word;
        std::memcpy(&word, value, sizeof(W));
        W* out = reinterpret_cast<W*>(dst);
        parallel_range(pool, count, int64_t(sizeof(W)),
                       [&](int64_t begin, int64_t end) { std::fill(out + begin, out + end, word); });
    });
}

// ---- shapes ----------------------------------------------------------------------------------------------------

inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
    std::vector<int64_t> strides(shape.size());
    int64_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = stride;
        stride *= shape[i];
    }
    return strides;
}

inline int64_t product(const Shape& shape, size_t begin, size_t end) {
    int64_t result = 1;
    for (size_t i = begin; i < end; ++i) result *= shape[i];
    return result;
}

// The elements of an integer tensor (int32 or int64, or any integer type) as int64.
inline std::vector<int64_t> read_integers(const Tensor& tensor, std::string_view what) {
    std::vector<int64_t> values(size_t(tensor.size()));
    const auto copy = [&]<typename T>() {
        const T* data = tensor.ptr<T>();
        for (size_t i = 0; i < values.size(); ++i) values[i] = int64_t(data[i]);
    };
    switch (tensor.type) {
        case TESS_ELEMENT_INT64: copy.template operator()<int64_t>(); break;
        case TESS_ELEMENT_INT32: copy.template operator()<int32_t>(); break;
        case TESS_ELEMENT_INT16: copy.template operator()<int16_t>(); break;
        case TESS_ELEMENT_INT8: copy.template operator()<int8_t>(); break;
        case TESS_ELEMENT_UINT8: copy.template operator()<uint8_t>(); break;
        case TESS_ELEMENT_UINT16: copy.template operator()<uint16_t>(); break;
        case TESS_ELEMENT_UINT32: copy.template operator()<uint32_t>(); break;
        case TESS_ELEMENT_UINT64: copy.template operator()<uint64_t>(); break;
        default: throw KernelError(std::string(what) + " must be an integer tensor");
    }
    return values;
}

// ---- strided copy ----------------------------------------------------------------------------------------------

// Walks the multi-index of the leading dims of a shape in row-major order, tracking an element offset.
class Odometer {
public:
    Odometer(std::span<const int64_t> dims, std::span<const int64_t> strides, int64_t start)
        : dims_(dims), strides_(strides), index_(dims.size()) {
        for (size_t i = dims.size(); i-- > 0;) {
            index_[i] = start % dims[i];
            start /= dims[i];
            offset_ += index_[i] * strides[i];
        }
    }
    int64_t offset() const { return offset_; }
    void next() {
        for (size_t i = dims_.size(); i-- > 0;) {
            offset_ += strides_[i];
            if (++index_[i] < dims_[i]) return;
            offset_ -= strides_[i] * dims_[i];
            index_[i] = 0;
        }
    }

private:
    std::span<const int64_t> dims_;
    std::span<const int64_t> strides_;
    std::vector<int64_t> index_;
    int64_t offset_ = 0;
};

// Drops unit dims and merges dims that are contiguous with each other in the source.
inline void simplify_strided(Shape& shape, std::vector<int64_t>& strides) {
    Shape dims;
    std::vector<int64_t> steps;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 1) continue;
        if (!dims.empty() && steps.back() == strides[i] * shape[i]) {
            dims.back() *= shape[i];
            steps.back() = strides[i];
        } else {
            dims.push_back(shape[i]);
            steps.push_back(strides[i]);
        }
    }
    shape = std::move(dims);
    strides = std::move(steps);
}

// dst (contiguous, `shape`) = the elements of src at element strides `strides` (any sign, zero for broadcast).
inline void copy_strided(std::byte* dst, const std::byte* src, size_t es, Shape shape, std::vector<int64_t> strides,
                         ThreadPool& pool) {
    const int64_t total = shape_size(shape);
    if (total == 0) return;
    simplify_strided(shape, strides);
    if (shape.empty()) {
        std::memcpy(dst, src, es);
        return;
    }
    const size_t rank = shape.size();
    const int64_t inner = shape.back();
    const int64_t inner_stride = strides.back();
    const int64_t rows = total / inner;
    const std::span<const int64_t> outer_dims(shape.data(), rank - 1);
    const std::span<const int64_t> outer_strides(strides.data(), rank - 1);

    if (inner_stride == 1) {  // contiguous rows
        const size_t row_bytes = size_t(inner) * es;
        parallel_range(pool, rows, int64_t(row_bytes), [&](int64_t begin, int64_t end) {
            Odometer at(outer_dims, outer_strides, begin);
            for (int64_t row = begin; row < end; ++row, at.next())
                std::memcpy(dst + size_t(row) * row_bytes, src + at.offset() * int64_t(es), row_bytes);
        });
        return;
    }

    // A transpose: some outer dim is contiguous in the source.  Copy in square tiles so that both sides stay in
    // cache.
    size_t unit_dim = rank;
    for (size_t i = 0; i + 1 < rank; ++i)
        if (strides[i] == 1) unit_dim = i;
    if (unit_dim < rank && shape[unit_dim] >= 4 && inner >= 4) {
        constexpr int64_t kTile = 16;
        const std::vector<int64_t> dst_strides = contiguous_strides(shape);
        Shape other_dims;
        std::vector<int64_t> other_src, other_dst;
        for (size_t i = 0; i + 1 < rank; ++i) {
            if (i == unit_dim) continue;
            other_dims.push_back(shape[i]);
            other_src.push_back(strides[i]);
            other_dst.push_back(dst_strides[i]);
        }
        const int64_t rows_dim = shape[unit_dim];
        const int64_t row_tiles = (rows_dim + kTile - 1) / kTile;
        const int64_t dst_row_stride = dst_strides[unit_dim];
        const int64_t outer_count = shape_size(other_dims);
        with_word(es, [&]<typename W>() {
            const W* in = reinterpret_cast<const W*>(src);
            W* out = reinterpret_cast<W*>(dst);
            parallel_range(pool, outer_count * row_tiles, kTile * inner * int64_t(es), [&](int64_t begin, int64_t end) {
                for (int64_t unit = begin; unit < end; ++unit) {
                    const int64_t outer = unit / row_tiles;
                    const int64_t a0 = (unit % row_tiles) * kTile;
                    const int64_t a1 = std::min(rows_dim, a0 + kTile);
                    Odometer src_at(other_dims, other_src, outer);
                    Odometer dst_at(other_dims, other_dst, outer);
                    const W* s = in + src_at.offset();
                    W* d = out + dst_at.offset();
                    for (int64_t b0 = 0; b0 < inner; b0 += kTile) {
                        const int64_t b1 = std::min(inner, b0 + kTile);
                        for (int64_t a = a0; a < a1; ++a) {
                            W* drow = d + a * dst_row_stride;
                            const W* scol = s + a;
                            for (int64_t b = b0; b < b1; ++b) drow[b] = scol[b * inner_stride];
                        }
                    }
                }
            });
        });
        return;
    }

    // General gather: strided (or broadcast) innermost dim.
    with_word(es, [&]<typename W>() {
        const W* in = reinterpret_cast<const W*>(src);
        W* out = reinterpret_cast<W*>(dst);
        parallel_range(pool, rows, inner * int64_t(es), [&](int64_t begin, int64_t end) {
            Odometer at(outer_dims, outer_strides, begin);
            for (int64_t row = begin; row < end; ++row, at.next()) {
                const W* s = in + at.offset();
                W* d = out + row * inner;
                for (int64_t b = 0; b < inner; ++b) d[b] = s[b * inner_stride];
            }
        });
    });
}

// ---- concatenation and splitting of row blocks -------------------------------------------------------------------

// dst = for each of `outer` rows: srcs[0] row, srcs[1] row, ...; part k's rows are part_bytes[k] long.
inline void concat_rows(std::byte* dst, std::span<const std::byte* const> srcs, std::span<const int64_t> part_bytes,
                        int64_t outer, ThreadPool& pool) {
    const int64_t row_bytes = std::accumulate(part_bytes.begin(), part_bytes.end(), int64_t(0));
    if (outer == 1) {
        int64_t offset = 0;
        for (size_t k = 0; k < srcs.size(); ++k) {
            // An input its producer already wrote in place (KernelMemory::ConcatInPlace) is not copied.
            if (part_bytes[k] && srcs[k] != dst + offset)
                parallel_memcpy(pool, dst + offset, srcs[k], size_t(part_bytes[k]));
            offset += part_bytes[k];
        }
        return;
    }
    parallel_range(pool, outer, row_bytes, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            std::byte* out = dst + row * row_bytes;
            for (size_t k = 0; k < srcs.size(); ++k) {
                if (part_bytes[k]) std::memcpy(out, srcs[k] + row * part_bytes[k], size_t(part_bytes[k]));
                out += part_bytes[k];
            }
        }
    });
}

// The inverse of concat_rows.
inline void split_rows(const std::byte* src, std::span<std::byte* const> dsts, std::span<const int64_t> part_bytes,
                       int64_t outer, ThreadPool& pool) {
    const int64_t row_bytes = std::accumulate(part_bytes.begin(), part_bytes.end(), int64_t(0));
    if (outer == 1) {
        int64_t offset = 0;
        for (size_t k = 0; k < dsts.size(); ++k) {
            if (part_bytes[k] && dsts[k]) parallel_memcpy(pool, dsts[k], src + offset, size_t(part_bytes[k]));
            offset += part_bytes[k];
        }
        return;
    }
    parallel_range(pool, outer, row_bytes, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const std::byte* in = src + row * row_bytes;
            for (size_t k = 0; k < dsts.size(); ++k) {
                if (dsts[k] && part_bytes[k]) std::memcpy(dsts[k] + row * part_bytes[k], in, size_t(part_bytes[k]));
                in += part_bytes[k];
            }
        }
    });
}

// ---- any element type --------------------------------------------------------------------------------------------

// What a byte-level data-movement step works on.
struct MoveBuffers {
    std::vector<const std::byte*> inputs;
    std::vector<std::byte*> outputs;
    size_t element_size = 0;
    const std::byte* fill = nullptr;  // one element: the padding value
};

// Runs `move(const MoveBuffers&)` (which copies elements between the buffers by element size) for tensors of any
// element type.  All inputs and outputs share one element type.  Fixed-size types run directly on the tensors'
// memory.  String tensors run on int64 element numbers instead (input k's elements numbered after input k-1's),
// and the strings are copied afterwards through the host; the padding number is -1.  Packed sub-byte types run on
// one byte per element, unpacked before and packed after.  `fill` is a one-element tensor of the same type (the
// padding value) or null for zero / the empty string.
template <typename Move> void move_elements(const TessHostApi& host, std::span<const Tensor* const> inputs,
                                            std::span<Tensor* const> outputs, Move&& move,
                                            const Tensor* fill = nullptr) {
    const int32_t type = inputs.empty() ? outputs.front()->type : inputs.front()->type;
    // Every buffer is walked at one element size: a tensor of another type would be read or written past its end.
    auto same_type = [type](const Tensor* t) { return t == nullptr || t->type == type; };
    if (!std::all_of(inputs.begin(), inputs.end(), same_type) || !std::all_of(outputs.begin(), outputs.end(), same_type) ||
        !same_type(fill))
        throw KernelError("tensors of different element types where one type is required");
    MoveBuffers buffers;
    if (const size_t es = element_size(type)) {
        static const std::byte zeros[16] = {};
        for (const Tensor* input : inputs) buffers.inputs.push_back(static_cast<const std::byte*>(input->data));
        for (Tensor* output : outputs) buffers.outputs.push_back(static_cast<std::byte*>(output->data));
        buffers.element_size = es;
        buffers.fill = fill ? static_cast<const std::byte*>(fill->data) : zeros;
        move(static_cast<const MoveBuffers&>(buffers));
        return;
    }

    if (type == TESS_ELEMENT_STRING) {
        std::vector<int64_t> bases;
        std::vector<std::vector<int64_t>> numbers(inputs.size());
        int64_t next = 0;
        for (size_t k = 0; k < inputs.size(); ++k) {
            bases.push_back(next);
            numbers[k].resize(size_t(inputs[k]->size()));
            std::iota(numbers[k].begin(), numbers[k].end(), next);
            next += inputs[k]->size();
            buffers.inputs.push_back(reinterpret_cast<const std::byte*>(numbers[k].data()));
        }
        std::vector<std::vector<int64_t>> results(outputs.size());
        for (size_t k = 0; k < outputs.size(); ++k) {
            results[k].resize(size_t(outputs[k]->size()));
            buffers.outputs.push_back(reinterpret_cast<std::byte*>(results[k].data()));
        }
        const int64_t fill_number = -1;
        buffers.element_size = sizeof(int64_t);
        buffers.fill = reinterpret_cast<const std::byte*>(&fill_number);
        move(static_cast<const MoveBuffers&>(buffers));
        const std::string fill_text = fill ? std::string(values::get_string(host, fill->value, 0)) : std::string();
        for (size_t k = 0; k < outputs.size(); ++k) {
            for (size_t i = 0; i < results[k].size(); ++i) {
                const int64_t number = results[k][i];
                if (number < 0) {
                    values::set_string(host, outputs[k]->value, i, fill_text);
                    continue;
                }
                const size_t source = size_t(std::upper_bound(bases.begin(), bases.end(), number) - bases.begin()) - 1;
                values::set_string(host, outputs[k]->value, i,
                                   values::get_string(host, inputs[source]->value, size_t(number - bases[source])));
            }
        }
        return;
    }

    if (const int bits = fp::packed_bits(type)) {
        std::vector<std::vector<uint8_t>> unpacked(inputs.size());
        for (size_t k = 0; k < inputs.size(); ++k) {
            unpacked[k].resize(size_t(inputs[k]->size()));
            for (size_t i = 0; i < unpacked[k].size(); ++i)
                unpacked[k][i] = fp::load_packed(inputs[k]->data, bits, int64_t(i));
            buffers.inputs.push_back(reinterpret_cast<const std::byte*>(unpacked[k].data()));
        }
        std::vector<std::vector<uint8_t>> results(outputs.size());
        for (size_t k = 0; k < outputs.size(); ++k) {
            results[k].resize(size_t(outputs[k]->size()));
            buffers.outputs.push_back(reinterpret_cast<std::byte*>(results[k].data()));
        }
        const uint8_t fill_code = fill ? fp::load_packed(fill->data, bits, 0) : 0;
        buffers.element_size = 1;
        buffers.fill = reinterpret_cast<const std::byte*>(&fill_code);
        move(static_cast<const MoveBuffers&>(buffers));
        for (size_t k = 0; k < outputs.size(); ++k) {
            if (results[k].empty()) continue;
            std::memset(outputs[k]->data, 0, element_bytes(type, size_t(outputs[k]->size())));
            for (size_t i = 0; i < results[k].size(); ++i)
                fp::store_packed(outputs[k]->data, bits, int64_t(i), results[k][i]);
        }
        return;
    }
    throw_unsupported_type("data movement", type);
}

// Single input, single output convenience form.
template <typename Move> void move_elements(const TessHostApi& host, const Tensor& input, Tensor& output, Move&& move,
                                            const Tensor* fill = nullptr) {
    const Tensor* in[] = {&input};
    Tensor* out[] = {&output};
    move_elements(host, std::span<const Tensor* const>(in), std::span<Tensor* const>(out), std::forward<Move>(move),
                  fill);
}

}  // namespace tessera::cpu::movement
