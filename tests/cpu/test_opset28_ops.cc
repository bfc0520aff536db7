// Tests of what opset 28 changed in the CPU kernels, beyond the ONNX conformance cases: BitShift on signed types
// and out-of-range shifts, SwiGLU, SpaceToDepth's mode, Mod's floating-point edge cases, the float16/bfloat16
// reductions (which accumulate in float and round once), bfloat16 Einsum, and bfloat16 tensors through the
// operators that gained the type (Celu, Compress, OneHot, ReverseSequence, Unique, Optional*).  References are
// plain loops written here, or the float kernel run on the widened inputs where a 16-bit type computes in float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "util/element_convert.h"  // element_type_of<fp::Half>, element_type_of<fp::BFloat16>
#include "util/float16_compute.h"

namespace tessera::cpu {
namespace {

using testing::NodeBuilder;
using testing::run_node;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

const KernelRegistry& registry() { return testing::registry_with<register_all_kernels>(); }

template <typename... Ts, typename Fn> void for_each_type(Fn&& fn) { (fn.template operator()<Ts>(), ...); }

std::vector<float> random_floats(int64_t count, uint32_t seed, float lo = -6.0f, float hi = 6.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = dist(gen);
    return v;
}

// A float16/bfloat16 tensor holding `values` rounded to the type.
ValueHandle narrow_tensor(int32_t type, const Shape& shape, const std::vector<float>& values) {
    ValueHandle v = testing::make_tensor_value(type, shape);
    narrow_from_float(values.data(), type, v->bytes.data(), shape_size(shape));
    return v;
}

// The float tensor a float16/bfloat16 tensor widens to (exactly).
ValueHandle widened(const ValueHandle& v) {
    ValueHandle wide = testing::make_tensor_value(TESS_ELEMENT_FLOAT32, v->dims);
    widen_to_float(v->element_type, v->bytes.data(), reinterpret_cast<float*>(wide->bytes.data()), v->element_count());
    return wide;
}

// A float tensor rounded to `type`.
ValueHandle narrowed(const ValueHandle& v, int32_t type) {
    ValueHandle narrow = testing::make_tensor_value(type, v->dims);
    narrow_from_float(reinterpret_cast<const float*>(v->bytes.data()), type, narrow->bytes.data(), v->element_count());
    return narrow;
}

void expect_same_tensor(const ValueHandle& got, const ValueHandle& want) {
    ASSERT_EQ(got->element_type, want->element_type);
    ASSERT_EQ(got->dims, want->dims);
    ASSERT_EQ(got->bytes.size(), want->bytes.size());
    EXPECT_EQ(std::memcmp(got->bytes.data(), want->bytes.data(), got->bytes.size()), 0);
}

// Runs the node (attributes from `setup`) on the inputs and again on float copies of its float16/bfloat16 inputs
// (the others are passed unchanged), and expects the first result to be the second rounded to input 0's type once
// (or equal to it when it is not a float tensor, e.g. ArgMax's indices).
void expect_computes_in_float(const std::function<void(NodeBuilder&)>& setup, const char* op, int opset,
                              const std::vector<ValueHandle>& inputs) {
    NodeBuilder node(op, opset), float_node(op, opset);
    std::vector<ValueHandle> float_inputs;
    for (const ValueHandle& input : inputs) {
        const bool sixteen = is_16bit_float(input->element_type);
        float_inputs.push_back(sixteen ? widened(input) : input);
        node.input(input->element_type, input->dims);
        float_node.input(float_inputs.back()->element_type, input->dims);
    }
    node.output();
    float_node.output();
    setup(node);
    setup(float_node);
    const ValueHandle got = run_node(registry(), node, inputs)[0];
    const ValueHandle want = run_node(registry(), float_node, float_inputs)[0];
    if (want->element_type == TESS_ELEMENT_FLOAT32) expect_same_tensor(got, narrowed(want, inputs[0]->element_type));
    else expect_same_tensor(got, want);
}

// ---- BitShift ------------------------------------------------------------------------------------------------

// Plain reference without shift operators: a left shift doubles in uint64 and wraps to T's width; a right shift
// halves, rounding toward -inf (what an arithmetic shift does to a signed value).
template <typename T> T reference_shift(T x, T amount, bool left) {
    constexpr int64_t kBits = int64_t(sizeof(T) * 8);
    if (int64_t(amount) < 0 || int64_t(amount) >= kBits) return (!left && x < T(0)) ? T(-1) : T(0);
    if (left) {
        uint64_t u = uint64_t(x);
        for (int64_t i = 0; i < int64_t(amount); ++i) u *= 2;
        return T(u);  // modular conversion (C++20)
    }
    if constexpr (std::is_signed_v<T>) {
        int64_t v = x;
        for (int64_t i = 0; i < int64_t(amount); ++i) v = (v < 0 && v % 2 != 0) ? v / 2 - 1 : v / 2;
        return T(v);
    } else {
        uint64_t v = x;
        for (int64_t i = 0; i < int64_t(amount); ++i) v /= 2;
        return T(v);
    }
}

TEST(BitShift, EveryIntegerTypeAgainstReference) {
    for_each_type<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>([]<typename T>() {
        using Limits = std::numeric_limits<T>;
        const int64_t bits = int64_t(sizeof(T) * 8);
        std::vector<T> xs{T(0), T(1), T(2), T(5), T(37), T(100), Limits::max(), T(Limits::max() - 1), Limits::min()};
        std::vector<T> shifts{T(0), T(1), T(3), T(bits - 1), T(bits), T(bits + 1), T(100)};
        if constexpr (std::is_signed_v<T>) {
            for (T v : {T(-1), T(-2), T(-6), T(-100), T(Limits::min() + 1)}) xs.push_back(v);
            for (T s : {T(-1), T(-2), Limits::min()}) shifts.push_back(s);
        }
        const int64_t nx = int64_t(xs.size()), ns = int64_t(shifts.size());
        for (const char* direction : {"LEFT", "RIGHT"}) {
            SCOPED_TRACE(std::string(element_type_name(element_type_of<T>())) + " " + direction);
            NodeBuilder node("BitShift", 28);
            node.input(element_type_of<T>()).input(element_type_of<T>()).output().attr_string("direction", direction);
            // [nx, 1] against [1, ns]: every value with every shift.
            const auto out = run_node(registry(), node, {tensor<T>({nx, 1}, xs), tensor<T>({1, ns}, shifts)});
            const std::vector<T> got = values_of<T>(*out[0]);
            ASSERT_EQ(out[0]->dims, (Shape{nx, ns}));
            for (int64_t i = 0; i < nx; ++i)
                for (int64_t j = 0; j < ns; ++j)
                    EXPECT_EQ(got[size_t(i * ns + j)], reference_shift(xs[size_t(i)], shifts[size_t(j)],
                                                                       std::string(direction) == "LEFT"))
                        << "x " << int64_t(xs[size_t(i)]) << " shift " << int64_t(shifts[size_t(j)]);
        }
    });
}

TEST(BitShift, SignedEdgeCases) {
    NodeBuilder right("BitShift", 28);
    right.input().input().output().attr_string("direction", "RIGHT");
    auto out = run_node(registry(), right,
                        {tensor<int8_t>({6}, {-128, -1, -7, 64, -5, 5}), tensor<int8_t>({6}, {7, 3, 1, 8, -1, -1})});
    EXPECT_EQ(values_of<int8_t>(*out[0]), (std::vector<int8_t>{-1, -1, -4, 0, -1, 0}));
    NodeBuilder left("BitShift", 28);
    left.input().input().output().attr_string("direction", "LEFT");
    out = run_node(registry(), left,
                   {tensor<int32_t>({5}, {1, -1, 0x40000000, 3, -3}), tensor<int32_t>({5}, {31, 1, 1, 32, -4})});
    const int32_t min = std::numeric_limits<int32_t>::min();
    EXPECT_EQ(values_of<int32_t>(*out[0]), (std::vector<int32_t>{min, -2, min, 0, 0}));
}

TEST(BitShift, SignedTypesFromOpset28) {
    for (int opset : {11, 27, 28}) {
        NodeBuilder node("BitShift", opset);
        node.input(TESS_ELEMENT_INT32).input(TESS_ELEMENT_INT32).output().attr_string("direction", "LEFT");
        std::string why;
        const bool found = registry().find(node.view(), &why) != nullptr;
        EXPECT_EQ(found, opset >= 28) << "opset " << opset;
        if (!found) {
            EXPECT_NE(why.find(element_type_name(TESS_ELEMENT_INT32)), std::string::npos) << why;
        }
    }
}

// ---- SwiGLU --------------------------------------------------------------------------------------------------

double swiglu_reference(double a, double b, double alpha) { return a / (1.0 + std::exp(-alpha * a)) * b; }

TEST(SwiGLU, FloatAndDoubleMatchReference) {
    // Sizes around the 16-lane blocks, plus one large enough to be split across threads.
    for (int64_t n : {1, 15, 16, 33, 100003}) {
        for (float alpha : {1.0f, 0.5f, -1.75f}) {
            SCOPED_TRACE("n " + std::to_string(n) + " alpha " + std::to_string(alpha));
            const auto a = random_floats(n, uint32_t(n)), b = random_floats(n, uint32_t(n + 7));
            NodeBuilder node("SwiGLU", 28);
            node.input().input().output().attr_float("alpha", alpha);
            const auto got = values_of<float>(*run_node(registry(), node, {tensor<float>({n}, a),
                                                                           tensor<float>({n}, b)})[0]);
            for (size_t i = 0; i < got.size(); ++i) {
                const double want = swiglu_reference(a[i], b[i], alpha);
                ASSERT_NEAR(got[i], want, 4e-6 * std::max(1.0, std::abs(want))) << "at " << i;
            }
            const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
            NodeBuilder node_d("SwiGLU", 28);
            node_d.input().input().output().attr_float("alpha", alpha);
            const auto got_d = values_of<double>(*run_node(registry(), node_d, {tensor<double>({n}, ad),
                                                                               tensor<double>({n}, bd)})[0]);
            for (size_t i = 0; i < got_d.size(); ++i)
                ASSERT_NEAR(got_d[i], swiglu_reference(ad[i], bd[i], double(alpha)), 1e-12) << "at " << i;
        }
    }
}

TEST(SwiGLU, DefaultAlphaIsOne) {
    NodeBuilder node("SwiGLU", 28);
    node.input().input().output();
    const auto out = run_node(registry(), node, {tensor<float>({2, 2}, {1.0f, -2.0f, 3.0f, 0.0f}),
                                                 tensor<float>({2, 2}, {0.5f, 1.0f, -1.0f, 2.0f})});
    const auto got = values_of<float>(*out[0]);
    const std::vector<double> want{swiglu_reference(1, 0.5, 1), swiglu_reference(-2, 1, 1),
                                   swiglu_reference(3, -1, 1), 0.0};
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
}

TEST(SwiGLU, SixteenBitFloatsComputeInFloat) {
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        SCOPED_TRACE(element_type_name(type));
        const Shape shape{3, 37};
        expect_computes_in_float([](NodeBuilder& n) { n.attr_float("alpha", 0.75f); }, "SwiGLU", 28,
                                 {narrow_tensor(type, shape, random_floats(shape_size(shape), 3)),
                                  narrow_tensor(type, shape, random_floats(shape_size(shape), 4))});
    }
}

TEST(SwiGLU, RejectsMismatchedShapesAndTypes) {
    NodeBuilder node("SwiGLU", 28);
    node.input().input().output();
    EXPECT_THROW(run_node(registry(), node, {tensor<float>({2, 3}, std::vector<float>(6)),
                                             tensor<float>({3}, std::vector<float>(3))}),
                 KernelError);
    NodeBuilder mixed("SwiGLU", 28);
    mixed.input().input().output();
    EXPECT_THROW(run_node(registry(), mixed, {tensor<float>({2}, {1, 2}), tensor<double>({2}, {1, 2})}),
                 KernelError);
}

// ---- SpaceToDepth / DepthToSpace -----------------------------------------------------------------------------

TEST(SpaceToDepth, ModesMatchReferenceAndInvertDepthToSpace) {
    const int64_t n = 2, c = 3, h = 4, w = 6, b = 2;
    std::vector<int32_t> x(size_t(n * c * h * w));
    for (size_t i = 0; i < x.size(); ++i) x[i] = int32_t(i);
    for (const char* mode : {"DCR", "CRD"}) {
        SCOPED_TRACE(mode);
        const bool crd = std::string(mode) == "CRD";
        NodeBuilder node("SpaceToDepth", 28);
        node.input().output().attr_int("blocksize", b).attr_string("mode", mode);
        const ValueHandle y = run_node(registry(), node, {tensor<int32_t>({n, c, h, w}, x)})[0];
        ASSERT_EQ(y->dims, (Shape{n, c * b * b, h / b, w / b}));
        const auto got = values_of<int32_t>(*y);
        for (int64_t in = 0; in < n; ++in)
            for (int64_t ic = 0; ic < c; ++ic)
                for (int64_t ih = 0; ih < h; ++ih)
                    for (int64_t iw = 0; iw < w; ++iw) {
                        const int64_t offset = (ih % b) * b + iw % b;
                        const int64_t depth = crd ? ic * b * b + offset : offset * c + ic;
                        const int64_t o = ((in * c * b * b + depth) * (h / b) + ih / b) * (w / b) + iw / b;
                        ASSERT_EQ(got[size_t(o)], x[size_t(((in * c + ic) * h + ih) * w + iw)]);
                    }
        NodeBuilder back("DepthToSpace", 28);
        back.input().output().attr_int("blocksize", b).attr_string("mode", mode);
        EXPECT_EQ(values_of<int32_t>(*run_node(registry(), back, {y})[0]), x);
    }
}

TEST(SpaceToDepth, DefaultModeIsDcrAndUnknownModesAreRefused) {
    const std::vector<float> x = random_floats(16, 5);
    NodeBuilder plain("SpaceToDepth", 13), dcr("SpaceToDepth", 28);
    plain.input().output().attr_int("blocksize", 2);
    dcr.input().output().attr_int("blocksize", 2).attr_string("mode", "DCR");
    EXPECT_EQ(values_of<float>(*run_node(registry(), plain, {tensor<float>({1, 1, 4, 4}, x)})[0]),
              values_of<float>(*run_node(registry(), dcr, {tensor<float>({1, 1, 4, 4}, x)})[0]));
    NodeBuilder bad("SpaceToDepth", 28);
    bad.input().output().attr_int("blocksize", 2).attr_string("mode", "RCD");
    EXPECT_THROW(testing::create_kernel(registry(), bad), KernelError);
}

// ---- Mod -----------------------------------------------------------------------------------------------------

TEST(Mod, FloatingPointEdgeCasesWithFmod0) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> a{0.0f, -0.0f, 0.0f, inf, -inf, 5.0f, 5.0f, 5.0f, -5.0f, -5.0f, nan, 1.0f, 7.5f, -7.5f};
    const std::vector<float> b{-3.0f, 3.0f, 3.0f, 2.0f, 2.0f, 0.0f, inf, -inf, inf, -inf, 1.0f, nan, -2.0f, 2.0f};
    // numpy.mod: zeros take the divisor's sign; x mod +-inf is x when the signs agree, else the infinity.
    const std::vector<float> want{-0.0f, 0.0f, 0.0f, nan, nan, nan, 5.0f, -inf, inf, -5.0f, nan, nan, -0.5f, 0.5f};
    const int64_t count = int64_t(a.size());
    const auto check = [&](const std::vector<float>& got) {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
            if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
            } else {
                EXPECT_EQ(got[i], want[i]) << "at " << i;
                EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "at " << i;
            }
        }
    };
    NodeBuilder node("Mod", 28);
    node.input().input().output();
    check(values_of<float>(*run_node(registry(), node, {tensor<float>({count}, a), tensor<float>({count}, b)})[0]));
    NodeBuilder node_d("Mod", 28);
    node_d.input().input().output();
    const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    const auto got_d = values_of<double>(
        *run_node(registry(), node_d, {tensor<double>({count}, ad), tensor<double>({count}, bd)})[0]);
    check(std::vector<float>(got_d.begin(), got_d.end()));
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        SCOPED_TRACE(element_type_name(type));
        NodeBuilder node16("Mod", 28);
        node16.input().input().output();
        const ValueHandle y = run_node(registry(), node16, {narrow_tensor(type, {count}, a),
                                                            narrow_tensor(type, {count}, b)})[0];
        check(values_of<float>(*widened(y)));
    }
}

// ---- Reductions in float16 and bfloat16 ----------------------------------------------------------------------

TEST(Reduce, SixteenBitFloatsReduceInFloatAndRoundOnce) {
    const Shape shape{3, 4, 5, 6};
    const std::vector<std::string> ops{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                       "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
    // Trailing axes (rows), a middle axis (columns), alternating axes (the general path) and all axes.
    const std::vector<std::vector<int64_t>> axes_cases{{3}, {2, 3}, {1}, {0, 2}, {}};
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        const ValueHandle x = narrow_tensor(type, shape, random_floats(shape_size(shape), 8, 0.25f, 2.0f));
        for (const std::string& op : ops) {
            for (const auto& axes : axes_cases) {
                SCOPED_TRACE(op + " " + element_type_name(type) + " over " + std::to_string(axes.size()) + " axes");
                expect_computes_in_float([](NodeBuilder& n) { n.attr_int("keepdims", 0); }, op.c_str(), 28,
                                         {x, tensor<int64_t>({int64_t(axes.size())}, axes)});
            }
        }
    }
}

TEST(Reduce, SixteenBitSumsDoNotStallAtTheTypesPrecision) {
    // Accumulating in float16 would stop at 2048 (2048 + 1 rounds back to 2048), in bfloat16 at 256.
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        SCOPED_TRACE(element_type_name(type));
        NodeBuilder node("ReduceSum", 13);
        node.input().output().attr_int("keepdims", 0);
        const ValueHandle ones = narrow_tensor(type, {4096}, std::vector<float>(4096, 1.0f));
        const ValueHandle y = run_node(registry(), node, {ones})[0];
        EXPECT_EQ(values_of<float>(*widened(y)), std::vector<float>{4096.0f});
    }
}

TEST(Reduce, SixteenBitArgMaxArgMin) {
    const std::vector<float> x{1, 5, 5, 2, 0, 0, 7, 3, 7, 1, 2, 1};  // [2, 2, 3]
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        for (const char* op : {"ArgMax", "ArgMin"}) {
            for (int64_t axis : {0, 2}) {
                for (int64_t last : {0, 1}) {
                    SCOPED_TRACE(std::string(op) + " " + element_type_name(type));
                    expect_computes_in_float(
                        [&](NodeBuilder& n) { n.attr_int("axis", axis).attr_int("select_last_index", last); }, op, 13,
                        {narrow_tensor(type, {2, 2, 3}, x)});
                }
            }
        }
    }
}

// Whether the registry has a kernel for a reduction of `type` (axes from the input from opset 18 on).
bool reduction_accepted(const char* op, int opset, int32_t type) {
    NodeBuilder node(op, opset);
    node.input(type);
    if (opset >= 18) node.input(TESS_ELEMENT_INT64);
    node.output();
    return registry().find(node.view(), nullptr) != nullptr;
}

TEST(Reduce, LogSumOpset28DropsIntegerTypes) {
    for (const char* op : {"ReduceLogSum", "ReduceLogSumExp"}) {
        for (int opset : {13, 18, 27, 28}) {
            for (int32_t type :
                 {TESS_ELEMENT_INT32, TESS_ELEMENT_UINT64, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
                EXPECT_EQ(reduction_accepted(op, opset, type), opset < 28 || is_16bit_float(type))
                    << op << " opset " << opset << " " << element_type_name(type);
            }
        }
    }
}

// ---- Einsum --------------------------------------------------------------------------------------------------

TEST(Einsum, SixteenBitFloatsComputeInFloat) {
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        SCOPED_TRACE(element_type_name(type));
        expect_computes_in_float([](NodeBuilder& n) { n.attr_string("equation", "bij,bjk->bik"); }, "Einsum", 28,
                                 {narrow_tensor(type, {2, 3, 40}, random_floats(240, 9)),
                                  narrow_tensor(type, {2, 40, 5}, random_floats(400, 10))});
        expect_computes_in_float([](NodeBuilder& n) { n.attr_string("equation", "ij->i"); }, "Einsum", 28,
                                 {narrow_tensor(type, {3, 300}, random_floats(900, 11))});
    }
}

// ---- Operators that gained bfloat16 --------------------------------------------------------------------------

TEST(Bfloat16, CeluComputesInFloat) {
    for (int32_t type : {TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}) {
        SCOPED_TRACE(element_type_name(type));
        expect_computes_in_float([](NodeBuilder& n) { n.attr_float("alpha", 1.5f); }, "Celu", 28,
                                 {narrow_tensor(type, {50}, random_floats(50, 12))});
    }
    NodeBuilder node("Celu", 28);
    node.input().output().attr_float("alpha", 2.0);
    const auto got = values_of<double>(*run_node(registry(), node, {tensor<double>({3}, {-1.0, 0.0, 3.0})})[0]);
    EXPECT_NEAR(got[0], 2.0 * std::expm1(-0.5), 1e-15);
    EXPECT_EQ(got[1], 0.0);
    EXPECT_EQ(got[2], 3.0);
}

// Data-movement kernels treat bfloat16 as 2-byte elements: the result holds the bits the uint16 run moves.
TEST(Bfloat16, MovesLikeTwoByteElements) {
    struct Case {
        const char* op;
        Shape shape;  // of the data input, which holds 12 elements
        std::function<void(NodeBuilder&)> attributes;
        std::vector<ValueHandle> other_inputs;
    };
    const std::vector<Case> cases{
        {"Compress", {3, 4}, [](NodeBuilder& n) { n.attr_int("axis", 1); },
         {tensor<bool>({4}, {true, false, true, true})}},
        {"ReverseSequence", {3, 4}, [](NodeBuilder& n) { n.attr_int("batch_axis", 1).attr_int("time_axis", 0); },
         {tensor<int64_t>({4}, {3, 1, 2, 0})}},
        {"SpaceToDepth", {1, 3, 2, 2}, [](NodeBuilder& n) { n.attr_int("blocksize", 2).attr_string("mode", "CRD"); },
         {}},
        {"OptionalGetElement", {3, 4}, {}, {}},
    };
    const std::vector<float> data = random_floats(12, 13);
    for (const Case& c : cases) {
        SCOPED_TRACE(c.op);
        const ValueHandle bf16 = narrow_tensor(TESS_ELEMENT_BFLOAT16, c.shape, data);
        ValueHandle bits = testing::make_tensor_value(TESS_ELEMENT_UINT16, c.shape);
        bits->bytes = bf16->bytes;
        ValueHandle outputs[2];
        for (int k = 0; k < 2; ++k) {
            std::vector<ValueHandle> inputs{k == 0 ? bf16 : bits};
            inputs.insert(inputs.end(), c.other_inputs.begin(), c.other_inputs.end());
            NodeBuilder node(c.op, 28);
            for (const ValueHandle& input : inputs) node.input(input->element_type);
            node.output();
            if (c.attributes) c.attributes(node);
            std::string why;
            ASSERT_NE(registry().find(node.view(), &why), nullptr) << why;
            outputs[k] = run_node(registry(), node, inputs)[0];
        }
        ASSERT_EQ(outputs[0]->element_type, TESS_ELEMENT_BFLOAT16);
        EXPECT_EQ(outputs[0]->dims, outputs[1]->dims);
        EXPECT_EQ(outputs[0]->bytes, outputs[1]->bytes);
    }
}

TEST(Bfloat16, OneHotValues) {
    NodeBuilder node("OneHot", 28);
    node.input(TESS_ELEMENT_INT64).input(TESS_ELEMENT_INT64).input(TESS_ELEMENT_BFLOAT16).output();
    const auto out = run_node(registry(), node, {tensor<int64_t>({3}, {0, 2, -1}), tensor<int64_t>({}, {3}),
                                                 narrow_tensor(TESS_ELEMENT_BFLOAT16, {2}, {-0.5f, 2.5f})});
    ASSERT_EQ(out[0]->element_type, TESS_ELEMENT_BFLOAT16);
    EXPECT_EQ(values_of<float>(*widened(out[0])),
              (std::vector<float>{2.5f, -0.5f, -0.5f, -0.5f, -0.5f, 2.5f, -0.5f, -0.5f, 2.5f}));
}

TEST(Bfloat16, UniqueSortsByValue) {
    NodeBuilder node("Unique", 28);
    node.input(TESS_ELEMENT_BFLOAT16).output().output().output().output();
    const auto out = run_node(registry(), node,
                              {narrow_tensor(TESS_ELEMENT_BFLOAT16, {6}, {2.0f, -1.0f, 2.0f, 0.5f, -1.0f, -3.0f})});
    ASSERT_EQ(out[0]->element_type, TESS_ELEMENT_BFLOAT16);
    EXPECT_EQ(values_of<float>(*widened(out[0])), (std::vector<float>{-3.0f, -1.0f, 0.5f, 2.0f}));
    EXPECT_EQ(values_of<int64_t>(*out[1]), (std::vector<int64_t>{5, 1, 3, 0}));
    EXPECT_EQ(values_of<int64_t>(*out[2]), (std::vector<int64_t>{3, 1, 3, 2, 1, 0}));
    EXPECT_EQ(values_of<int64_t>(*out[3]), (std::vector<int64_t>{1, 2, 1, 2}));
}

TEST(Bfloat16, OptionalWrapsAndUnwraps) {
    const ValueHandle x = narrow_tensor(TESS_ELEMENT_BFLOAT16, {2}, {1.5f, -2.0f});
    NodeBuilder wrap("Optional", 28);
    wrap.input(TESS_ELEMENT_BFLOAT16).output();
    const ValueHandle optional = run_node(registry(), wrap, {x})[0];
    ASSERT_EQ(optional->kind, TESS_VALUE_OPTIONAL);
    EXPECT_EQ(optional->element_type, TESS_ELEMENT_BFLOAT16);
    NodeBuilder has("OptionalHasElement", 28);
    has.input().output();
    EXPECT_EQ(values_of<bool>(*run_node(registry(), has, {optional})[0]), std::vector<bool>{true});
    NodeBuilder get("OptionalGetElement", 28);
    get.input().output();
    expect_same_tensor(run_node(registry(), get, {optional})[0], x);
}

}  // namespace
}  // namespace tessera::cpu
