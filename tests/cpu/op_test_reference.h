// Shared by the operator tests in test_gemm_ops.cc, test_conv_ops.cc and test_pool_norm_ops.cc: the kernel
// registry they run, random data, index helpers and the naive reference implementations (numpy.matmul, the ONNX
// Conv and ConvTranspose definitions) the optimized kernels are compared against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "tessera/provider.h"
#include "util/gemm.h"

namespace tessera::cpu::op_tests {

using testing::NodeBuilder;
using testing::run_node;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

// ---- helpers -------------------------------------------------------------------------------------------------

inline const KernelRegistry& registry() {
    return testing::registry_with<register_gemm_kernels, register_conv_kernels, register_conv_transpose_kernels,
                                  register_pool_kernels, register_normalization_kernels>();
}

using testing::random_values;

template <typename T>
void expect_near_all(const std::vector<T>& actual, const std::vector<double>& expected, double tolerance,
                     const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    for (size_t i = 0; i < actual.size(); ++i) {
        const double a = static_cast<double>(actual[i]), e = expected[i];
        ASSERT_TRUE(std::abs(a - e) <= tolerance * (1.0 + std::abs(e)))
            << what << ": element " << i << " is " << a << ", expected " << e;
    }
}

inline Shape dims_of(const ValueHandle& v) { return v->dims; }

inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
    std::vector<int64_t> index(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    return index;
}

inline int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    return flat;
}

inline Shape concat(Shape a, const Shape& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// ---- reference implementations --------------------------------------------------------------------------------

template <typename T>
std::vector<double> reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                                   const std::vector<T>& A, const std::vector<T>& B, double beta,
                                   const std::function<double(int64_t, int64_t)>& c) {
    std::vector<double> y(static_cast<size_t>(M * N));
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = ta ? A[k * M + m] : A[m * K + k];
                const double b = tb ? B[n * K + k] : B[k * N + n];
                sum += a * b;
            }
            y[m * N + n] = alpha * sum + (c ? beta * c(m, n) : 0.0);
        }
    }
    return y;
}

// numpy.matmul on explicit shapes.
template <typename T>
std::vector<double> reference_matmul(const Shape& a_shape, const std::vector<T>& A, const Shape& b_shape,
                                     const std::vector<T>& B, Shape& out_shape) {
    Shape as = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
    Shape bs = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
    const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
    const size_t rank = std::max(as.size(), bs.size()) - 2;
    Shape batch(rank);
    auto dim = [&](const Shape& s, size_t i) { return i + s.size() - 2 < rank ? 1 : s[i + s.size() - 2 - rank]; };
    for (size_t i = 0; i < rank; ++i) batch[i] = std::max(dim(as, i), dim(bs, i));
    out_shape = batch;
    if (a_shape.size() > 1) out_shape.push_back(M);
    if (b_shape.size() > 1) out_shape.push_back(N);
    const int64_t batches = shape_size(batch);
    std::vector<double> y(static_cast<size_t>(batches * M * N));
    for (int64_t p = 0; p < batches; ++p) {
        const auto idx = unravel(p, batch);
        int64_t a_off = 0, b_off = 0;
        for (size_t i = 0; i < rank; ++i) {
            a_off = a_off * dim(as, i) + (dim(as, i) == 1 ? 0 : idx[i]);
            b_off = b_off * dim(bs, i) + (dim(bs, i) == 1 ? 0 : idx[i]);
        }
        for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < N; ++n) {
                double sum = 0;
                for (int64_t k = 0; k < K; ++k) {
                    sum += static_cast<double>(A[a_off * M * K + m * K + k]) * B[b_off * K * N + k * N + n];
                }
                y[(p * M + m) * N + n] = sum;
            }
        }
    }
    return y;
}

struct ConvCase {
    Shape x{};  // [N, C, spatial...]
    int64_t out_channels = 0;
    Shape kernel{};
    int64_t group = 1;
    Shape strides{}, dilations{}, pads{};  // empty: defaults
    std::string auto_pad{};                // "" = attribute absent
    bool bias = true;
    bool constant_weights = false;
    bool declare_x_shape = false;  // X's shape known when the kernel is created (it may pick a kernel family then)
};

// Resolved geometry, computed independently of the kernel's helpers.
struct RefGeometry {
    Shape out, pads_begin, strides, dilations;
};

inline RefGeometry conv_geometry(const ConvCase& c) {
    const size_t rank = c.kernel.size();
    RefGeometry g;
    g.strides = c.strides;
    g.dilations = c.dilations;
    if (g.strides.empty()) g.strides.assign(rank, 1);
    if (g.dilations.empty()) g.dilations.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = c.x[d + 2], s = g.strides[d], span = (c.kernel[d] - 1) * g.dilations[d] + 1;
        if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
            const int64_t out = (in + s - 1) / s;
            const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
            g.out.push_back(out);
            g.pads_begin.push_back(c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
        } else if (c.auto_pad == "VALID") {
            g.out.push_back((in - span) / s + 1);
            g.pads_begin.push_back(0);
        } else {
            const int64_t pb = c.pads.empty() ? 0 : c.pads[d], pe = c.pads.empty() ? 0 : c.pads[d + rank];
            g.out.push_back((in + pb + pe - span) / s + 1);
            g.pads_begin.push_back(pb);
        }
    }
    return g;
}

inline std::vector<double> reference_conv(const ConvCase& c, const RefGeometry& g, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& b) {
    const int64_t N = c.x[0], C = c.x[1], M = c.out_channels, Cg = C / c.group, Mg = M / c.group;
    const Shape in(c.x.begin() + 2, c.x.end());
    const int64_t out_size = shape_size(g.out), k_size = shape_size(c.kernel);
    std::vector<double> y(static_cast<size_t>(N * M * out_size));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t m = 0; m < M; ++m) {
            const int64_t grp = m / Mg;
            for (int64_t o = 0; o < out_size; ++o) {
                const auto op = unravel(o, g.out);
                double sum = b.empty() ? 0.0 : b[m];
                for (int64_t ci = 0; ci < Cg; ++ci) {
                    for (int64_t k = 0; k < k_size; ++k) {
                        const auto kp = unravel(k, c.kernel);
                        std::vector<int64_t> ip(in.size());
                        bool inside = true;
                        for (size_t d = 0; d < in.size(); ++d) {
                            ip[d] = op[d] * g.strides[d] - g.pads_begin[d] + kp[d] * g.dilations[d];
                            inside = inside && ip[d] >= 0 && ip[d] < in[d];
                        }
                        if (!inside) continue;
                        sum +=
                            x[(n * C + grp * Cg + ci) * shape_size(in) + ravel(ip, in)] * w[(m * Cg + ci) * k_size + k];
                    }
                }
                y[(n * M + m) * out_size + o] = sum;
            }
        }
    }
    return y;
}

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
    return {v.begin(), v.end()};
}

template <typename T>
void run_conv_case(const ConvCase& c, uint32_t seed) {
    const int64_t C = c.x[1], M = c.out_channels;
    const Shape w_shape = concat({M, C / c.group}, c.kernel);
    const auto x = random_values<T>(shape_size(c.x), seed);
    const auto w = random_values<T>(shape_size(w_shape), seed + 1);
    const auto b = c.bias ? random_values<T>(M, seed + 2) : std::vector<T>();
    const RefGeometry g = conv_geometry(c);

    constexpr int32_t type = element_type_of<T>();
    NodeBuilder node("Conv", 11);
    node.input(type);
    ValueHandle w_value = tensor<T>(w_shape, w);
    if (c.constant_weights) {
        node.constant_input(w_value);
    } else {
        node.input(type);
    }
    if (c.bias) node.input(type);
    node.output(type).attr_int("group", c.group).attr_ints("kernel_shape", c.kernel);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);

    std::vector<ValueHandle> inputs{tensor<T>(c.x, x), c.constant_weights ? nullptr : w_value};
    if (c.bias) inputs.push_back(tensor<T>({M}, b));
    const auto outputs = run_node(registry(), node, inputs);
    EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], M}, g.out));
    const auto expected = reference_conv(c, g, widen(x), widen(w), widen(b));
    expect_near_all(values_of<T>(*outputs[0]), expected, std::is_same_v<T, float> ? 2e-5 : 1e-12, "Conv");
}

struct ConvTransposeCase {
    Shape x{};
    int64_t out_channels = 0;  // total
    Shape kernel{};
    int64_t group = 1;
    Shape strides{}, dilations{}, pads{}, output_padding{}, output_shape{};
    std::string auto_pad{};
    bool bias = true;
    int64_t opset = 11;
};

// Output dims and leading pads as the spec defines them (floor halves for the derived padding).
inline RefGeometry conv_transpose_geometry(const ConvTransposeCase& c) {
    const size_t rank = c.kernel.size();
    RefGeometry g;
    g.strides = c.strides;
    g.dilations = c.dilations;
    if (g.strides.empty()) g.strides.assign(rank, 1);
    if (g.dilations.empty()) g.dilations.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = c.x[d + 2], s = g.strides[d];
        const int64_t adj = c.output_padding.empty() ? 0 : c.output_padding[d];
        const int64_t full = s * (in - 1) + adj + (c.kernel[d] - 1) * g.dilations[d] + 1;
        const bool same = c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER";
        if (!c.output_shape.empty() || same) {
            const int64_t out = c.output_shape.empty() ? in * s : c.output_shape[d];
            const int64_t total = full - out;
            const int64_t half = static_cast<int64_t>(std::floor(total / 2.0));
            const bool upper = c.auto_pad == "SAME_UPPER";
            const bool odd_at_end = c.opset >= 11 ? upper : !upper;
            g.out.push_back(out);
            g.pads_begin.push_back(odd_at_end ? half : total - half);
        } else {
            const int64_t pb = c.pads.empty() ? 0 : c.pads[d], pe = c.pads.empty() ? 0 : c.pads[d + rank];
            g.out.push_back(full - pb - pe);
            g.pads_begin.push_back(pb);
        }
    }
    return g;
}

inline std::vector<double> reference_conv_transpose(const ConvTransposeCase& c, const RefGeometry& g,
                                             const std::vector<double>& x, const std::vector<double>& w,
                                             const std::vector<double>& b) {
    const int64_t N = c.x[0], C = c.x[1], M = c.out_channels, Cg = C / c.group, Mg = M / c.group;
    const Shape in(c.x.begin() + 2, c.x.end());
    const int64_t in_size = shape_size(in), out_size = shape_size(g.out), k_size = shape_size(c.kernel);
    std::vector<double> y(static_cast<size_t>(N * M * out_size), 0.0);
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t m = 0; m < M; ++m) {
            for (int64_t o = 0; o < out_size; ++o) y[(n * M + m) * out_size + o] = b.empty() ? 0.0 : b[m];
        }
        for (int64_t ci = 0; ci < C; ++ci) {
            const int64_t grp = ci / Cg;
            for (int64_t i = 0; i < in_size; ++i) {
                const auto ip = unravel(i, in);
                const double xv = x[(n * C + ci) * in_size + i];
                for (int64_t mg = 0; mg < Mg; ++mg) {
                    for (int64_t k = 0; k < k_size; ++k) {
                        const auto kp = unravel(k, c.kernel);
                        std::vector<int64_t> op(in.size());
                        bool inside = true;
                        for (size_t d = 0; d < in.size(); ++d) {
                            op[d] = ip[d] * g.strides[d] - g.pads_begin[d] + kp[d] * g.dilations[d];
                            inside = inside && op[d] >= 0 && op[d] < g.out[d];
                        }
                        if (!inside) continue;
                        const int64_t m = grp * Mg + mg;
                        y[(n * M + m) * out_size + ravel(op, g.out)] += xv * w[(ci * Mg + mg) * k_size + k];
                    }
                }
            }
        }
    }
    return y;
}

inline void run_conv_transpose_case(const ConvTransposeCase& c, uint32_t seed) {
    const int64_t C = c.x[1], M = c.out_channels;
    const Shape w_shape = concat({C, M / c.group}, c.kernel);
    const auto x = random_values<float>(shape_size(c.x), seed);
    const auto w = random_values<float>(shape_size(w_shape), seed + 1);
    const auto b = c.bias ? random_values<float>(M, seed + 2) : std::vector<float>();
    const RefGeometry g = conv_transpose_geometry(c);

    NodeBuilder node("ConvTranspose", c.opset);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
    if (c.bias) node.input(TESS_ELEMENT_FLOAT32);
    node.output(TESS_ELEMENT_FLOAT32).attr_int("group", c.group);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.output_padding.empty()) node.attr_ints("output_padding", c.output_padding);
    if (!c.output_shape.empty()) node.attr_ints("output_shape", c.output_shape);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);
    std::vector<ValueHandle> inputs{tensor<float>(c.x, x), tensor<float>(w_shape, w)};
    if (c.bias) inputs.push_back(tensor<float>({M}, b));
    const auto outputs = run_node(registry(), node, inputs);
    EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], M}, g.out));
    expect_near_all(values_of<float>(*outputs[0]), reference_conv_transpose(c, g, widen(x), widen(w), widen(b)), 2e-5,
                    "ConvTranspose");
}

}  // namespace tessera::cpu::op_tests
