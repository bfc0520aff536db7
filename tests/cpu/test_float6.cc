// float6e2m3 and float6e3m2 (OCP MX 6-bit floats, ONNX IR 14): the value of every code, rounding and saturation
// from float, the packing of four elements into three bytes, and the kernels that take them (Cast,
// QuantizeLinear, DequantizeLinear, data movement).  Expected values are the OCP MX spec's, which ml_dtypes (ONNX's
// reference) implements.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "util/element_convert.h"

namespace tessera::cpu {
namespace {

using testing::NodeBuilder;
using testing::run_node;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

const KernelRegistry& registry() { return testing::registry_with<register_tensor_kernels, register_tensor_value_kernels, register_quantize_kernels>(); }

struct Float6Type {
    int32_t type;
    const char* name;
    std::array<double, 32> magnitudes;  // codes 0..31; codes 32..63 are their negatives (-0 included)
};

const Float6Type kFloat6Types[] = {
    {TESS_ELEMENT_FLOAT6E2M3,
     "float6e2m3",
     {0.0,  0.125, 0.25, 0.375, 0.5,  0.625, 0.75, 0.875, 1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
      2.0,  2.25,  2.5,  2.75,  3.0,  3.25,  3.5,  3.75,  4.0, 4.5,   5.0,  5.5,   6.0, 6.5,   7.0,  7.5}},
    {TESS_ELEMENT_FLOAT6E3M2,
     "float6e3m2",
     {0.0, 0.0625, 0.125, 0.1875, 0.25, 0.3125, 0.375, 0.4375, 0.5,  0.625, 0.75, 0.875, 1.0,  1.25, 1.5,  1.75,
      2.0, 2.5,    3.0,   3.5,    4.0,  5.0,    6.0,   7.0,    8.0,  10.0,  12.0, 14.0,  16.0, 20.0, 24.0, 28.0}},
};

constexpr uint32_t kSign = 32;
constexpr uint32_t kMaxCode = 31;

double value_of_code(const Float6Type& t, uint32_t code) {
    const double magnitude = t.magnitudes[code & 31];
    return (code & kSign) ? -magnitude : magnitude;
}

uint32_t encode(int32_t type, double x) { return fp::encode_minifloat(*convert::minifloat_of(type), x, true); }

// A tensor of 6-bit codes, packed.
ValueHandle codes_tensor(int32_t type, const Shape& shape, const std::vector<uint8_t>& codes) {
    ValueHandle v = testing::make_tensor_value(type, shape);
    for (size_t i = 0; i < codes.size(); ++i) fp::store_packed(v->bytes.data(), 6, int64_t(i), codes[i]);
    return v;
}

std::vector<uint8_t> bytes_of(const testing::HarnessValue& v) {
    std::vector<uint8_t> bytes;
    for (std::byte b : v.bytes) bytes.push_back(std::to_integer<uint8_t>(b));
    return bytes;
}

std::vector<uint8_t> codes_of(const testing::HarnessValue& v) {
    std::vector<uint8_t> codes(static_cast<size_t>(v.element_count()));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = fp::load_packed(v.bytes.data(), 6, int64_t(i));
    return codes;
}

// onnx.proto's layout, written out: byte0 = x0 | (x1 & 3) << 6; byte1 = x1 >> 2 | (x2 & 15) << 4;
// byte2 = x2 >> 4 | x3 << 2; a partial last group zero padded, ceil(6 n / 8) bytes.
std::vector<uint8_t> spec_packing(std::vector<uint8_t> codes) {
    const size_t bytes = (codes.size() * 6 + 7) / 8;
    codes.resize((codes.size() + 3) / 4 * 4, 0);
    std::vector<uint8_t> out;
    for (size_t g = 0; g < codes.size(); g += 4) {
        const uint8_t x0 = codes[g], x1 = codes[g + 1], x2 = codes[g + 2], x3 = codes[g + 3];
        out.push_back(uint8_t(x0 | ((x1 & 0x3) << 6)));
        out.push_back(uint8_t((x1 >> 2) | ((x2 & 0xF) << 4)));
        out.push_back(uint8_t((x2 >> 4) | (x3 << 2)));
    }
    out.resize(bytes);
    return out;
}

TEST(Float6, EveryCodeHasTheSpecsValue) {
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        const fp::MiniFloat& fmt = *convert::minifloat_of(t.type);
        EXPECT_EQ(fmt.max_value(), t.magnitudes[kMaxCode]);
        // All 64 codes in one packed tensor, read back through the conversion path (its table and packed loads).
        std::vector<uint8_t> all(64);
        for (uint32_t code = 0; code < 64; ++code) all[code] = uint8_t(code);
        const ValueHandle packed = codes_tensor(t.type, {64}, all);
        std::vector<double> loaded(64);
        convert::load_doubles(t.type, packed->bytes.data(), 0, 64, loaded.data());
        for (uint32_t code = 0; code < 64; ++code) {
            const double expected = value_of_code(t, code);
            const float decoded = fp::decode_minifloat(fmt, code);
            EXPECT_EQ(decoded, expected) << "code " << code;
            EXPECT_EQ(std::signbit(decoded), (code & kSign) != 0) << "code " << code;  // -0 is code 32
            EXPECT_EQ(loaded[code], expected) << "code " << code;
            EXPECT_EQ(std::signbit(loaded[code]), (code & kSign) != 0) << "code " << code;
            EXPECT_EQ(encode(t.type, expected), code) << "code " << code;
        }
    }
}

TEST(Float6, RoundsToNearestTiesToEven) {
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        // Between each pair of neighbours: the midpoint goes to the even code, anything off it to the nearer one.
        for (uint32_t low = 0; low < kMaxCode; ++low) {
            const double a = t.magnitudes[low], b = t.magnitudes[low + 1], mid = (a + b) / 2;
            const uint32_t even = low % 2 == 0 ? low : low + 1;
            SCOPED_TRACE("between " + std::to_string(a) + " and " + std::to_string(b));
            EXPECT_EQ(encode(t.type, mid), even);
            EXPECT_EQ(encode(t.type, -mid), even | kSign);
            EXPECT_EQ(encode(t.type, std::nextafter(mid, 0.0)), low);
            EXPECT_EQ(encode(t.type, std::nextafter(mid, 100.0)), low + 1);
            EXPECT_EQ(encode(t.type, -std::nextafter(mid, 100.0)), (low + 1) | kSign);
        }
    }
    // A few cases computed with ml_dtypes.
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E2M3, 1.0625), 8u);     // tie: 1.0 (even) not 1.125
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E2M3, 1.1875), 10u);    // tie: 1.25 (even) not 1.125
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E2M3, 0.0625), 0u);     // half the smallest subnormal: zero
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E2M3, 0.09375), 1u);
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E2M3, -1e-30), kSign);  // underflow keeps the sign
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E3M2, 7.5), 24u);       // tie: 8.0 (even) not 7.0
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E3M2, 0.03125), 0u);
    EXPECT_EQ(encode(TESS_ELEMENT_FLOAT6E3M2, 0.0624), 1u);
}

TEST(Float6, SaturatesAndHasNoNanOrInfinity) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        const fp::MiniFloat& fmt = *convert::minifloat_of(t.type);
        const double max = t.magnitudes[kMaxCode];
        for (bool saturate : {true, false}) {  // there is no overflow code: both saturate
            for (double x : {max * 1.01, max * 1.5, 1e9, kInf}) {
                EXPECT_EQ(fp::encode_minifloat(fmt, x, saturate), kMaxCode) << x;
                EXPECT_EQ(fp::encode_minifloat(fmt, -x, saturate), kMaxCode | kSign) << x;
            }
            // NaN has no code either: ml_dtypes writes a zero of the opposite sign.
            EXPECT_EQ(fp::encode_minifloat(fmt, kNan, saturate), kSign);
            EXPECT_EQ(fp::encode_minifloat(fmt, -kNan, saturate), 0u);
        }
    }
}

TEST(Float6, PacksFourElementsIntoThreeBytes) {
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        for (size_t n = 1; n <= 9; ++n) {
            SCOPED_TRACE(std::to_string(n) + " elements");
            std::vector<uint8_t> codes;
            for (size_t i = 0; i < n; ++i) codes.push_back(uint8_t((i * 23 + 45) & 63));
            EXPECT_EQ(element_bytes(t.type, n), (n * 6 + 7) / 8);
            const ValueHandle packed = codes_tensor(t.type, {int64_t(n)}, codes);
            EXPECT_EQ(bytes_of(*packed), spec_packing(codes));
            EXPECT_EQ(codes_of(*packed), codes);
            // Rewriting one element leaves its neighbours (which may share its bytes) alone.
            for (size_t k = 0; k < n; ++k) {
                std::vector<uint8_t> changed = codes;
                changed[k] = uint8_t(~codes[k] & 63);
                ValueHandle copy = testing::clone_value(*packed);
                fp::store_packed(copy->bytes.data(), 6, int64_t(k), changed[k]);
                EXPECT_EQ(codes_of(*copy), changed) << "element " << k;
            }
        }
    }
}

// Float inputs around every interesting point: ties, values past the largest one, infinities, NaN, signed zeros.
std::vector<float> cast_inputs(const Float6Type& t) {
    const float max = float(t.magnitudes[kMaxCode]);
    return {0.0f, -0.0f, float(t.magnitudes[1]) / 2, float((t.magnitudes[8] + t.magnitudes[9]) / 2),
            float(-(t.magnitudes[9] + t.magnitudes[10]) / 2), max, max * 1.2f, -max * 4.0f,
            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::quiet_NaN()};
}

TEST(Float6, CastFromAndToFloat) {
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        const std::vector<float> x = cast_inputs(t);
        const Shape shape{int64_t(x.size())};
        std::vector<uint8_t> expected;
        for (float v : x) expected.push_back(uint8_t(encode(t.type, v)));
        for (int64_t saturate : {1, 0}) {  // `saturate` applies to float8 only; float6 always saturates
            NodeBuilder cast("Cast", 28);
            cast.input(TESS_ELEMENT_FLOAT32, shape).output().attr_int("to", t.type).attr_int("saturate", saturate);
            const ValueHandle y = run_node(registry(), cast, {tensor<float>(shape, x)})[0];
            ASSERT_EQ(y->element_type, t.type);
            EXPECT_EQ(y->bytes.size(), (x.size() * 6 + 7) / 8);
            EXPECT_EQ(codes_of(*y), expected) << "saturate " << saturate;
        }
        NodeBuilder back("Cast", 28);
        back.input(t.type, shape).output().attr_int("to", TESS_ELEMENT_FLOAT32);
        const ValueHandle z = run_node(registry(), back, {codes_tensor(t.type, shape, expected)})[0];
        const std::vector<float> floats = values_of<float>(*z);
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(floats[i], value_of_code(t, expected[i])) << "element " << i;
            EXPECT_EQ(std::signbit(floats[i]), (expected[i] & kSign) != 0) << "element " << i;
        }
    }
}

TEST(Float6, CastBetweenTheTwoFormats) {
    // Every float6e2m3 value converts to float6e3m2 rounded as a float would be (1.125 and 7.5 are ties).
    const Float6Type& from = kFloat6Types[0];
    const Float6Type& to = kFloat6Types[1];
    std::vector<uint8_t> all(64);
    for (uint32_t code = 0; code < 64; ++code) all[code] = uint8_t(code);
    NodeBuilder cast("Cast", 28);
    cast.input(from.type, Shape{64}).output().attr_int("to", to.type);
    const ValueHandle y = run_node(registry(), cast, {codes_tensor(from.type, {64}, all)})[0];
    const std::vector<uint8_t> codes = codes_of(*y);
    for (uint32_t code = 0; code < 64; ++code)
        EXPECT_EQ(codes[code], encode(to.type, value_of_code(from, code))) << "code " << code;
}

TEST(Float6, MovesPackedElementsThatStraddleBytes) {
    // Transpose [3, 5] -> [5, 3]: most elements change their bit offset within a byte.
    std::vector<uint8_t> codes(15);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 37 + 11) & 63);
    NodeBuilder transpose("Transpose", 21);
    transpose.input(TESS_ELEMENT_FLOAT6E3M2, Shape{3, 5}).output().attr_ints("perm", {1, 0});
    const ValueHandle y =
        run_node(registry(), transpose, {codes_tensor(TESS_ELEMENT_FLOAT6E3M2, {3, 5}, codes)})[0];
    ASSERT_EQ(y->dims, (Shape{5, 3}));
    const std::vector<uint8_t> moved = codes_of(*y);
    for (size_t r = 0; r < 5; ++r)
        for (size_t c = 0; c < 3; ++c) EXPECT_EQ(moved[r * 3 + c], codes[c * 5 + r]) << r << ", " << c;
    EXPECT_EQ(bytes_of(*y), spec_packing(moved)) << "padding bits are zero";
}

TEST(Float6, QuantizeAndDequantizeRoundTrip) {
    for (const Float6Type& t : kFloat6Types) {
        SCOPED_TRACE(t.name);
        const float scale = 0.5f;
        // Representable values (times the scale) come back exactly; others round to the nearest, ties to even,
        // and saturate.
        std::vector<float> x;
        for (uint32_t code = 0; code < 64; ++code) x.push_back(float(value_of_code(t, code)) * scale);
        x.push_back(float(t.magnitudes[kMaxCode]) * scale * 3.0f);
        x.push_back(float((t.magnitudes[9] + t.magnitudes[10]) / 2) * scale);
        const Shape shape{int64_t(x.size())};
        std::vector<uint8_t> expected;  // the reference's x / scale + zero_point: -0 + 0 is +0
        for (float v : x) expected.push_back(uint8_t(encode(t.type, double(v / scale) + 0.0)));

        const ValueHandle zero_point = codes_tensor(t.type, {}, {0});
        NodeBuilder quantize("QuantizeLinear", 28);
        quantize.input(TESS_ELEMENT_FLOAT32, shape).input(TESS_ELEMENT_FLOAT32, Shape{}).input(t.type, Shape{});
        quantize.output();
        const ValueHandle q = run_node(registry(), quantize, {tensor<float>(shape, x), testing::scalar(scale),
                                                             zero_point})[0];
        ASSERT_EQ(q->element_type, t.type);
        EXPECT_EQ(codes_of(*q), expected);

        // Without a zero point the type comes from output_dtype.
        NodeBuilder by_dtype("QuantizeLinear", 28);
        by_dtype.input(TESS_ELEMENT_FLOAT32, shape).input(TESS_ELEMENT_FLOAT32, Shape{}).output();
        by_dtype.attr_int("output_dtype", t.type);
        const ValueHandle q2 = run_node(registry(), by_dtype, {tensor<float>(shape, x), testing::scalar(scale)})[0];
        EXPECT_EQ(q2->bytes, q->bytes);

        NodeBuilder dequantize("DequantizeLinear", 28);
        dequantize.input(t.type, shape).input(TESS_ELEMENT_FLOAT32, Shape{}).input(t.type, Shape{}).output();
        const ValueHandle y = run_node(registry(), dequantize, {q, testing::scalar(scale), zero_point})[0];
        const std::vector<float> back = values_of<float>(*y);
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(back[i], float(value_of_code(t, expected[i])) * scale) << "element " << i;
            if (i < 64) {
                EXPECT_EQ(back[i], x[i]) << "element " << i;
            }
        }
    }
}

TEST(Float6, NonZeroZeroPointShiftsBeforeRounding) {
    // y = round(x / scale + zero_point) in float6; x = (y - zero_point) * scale.
    const int32_t type = TESS_ELEMENT_FLOAT6E2M3;
    const std::vector<float> x{0.0f, 1.0f, -3.0f, 2.5f};
    const Shape shape{4};
    const ValueHandle zero_point = codes_tensor(type, {}, {uint8_t(encode(type, 1.5))});
    NodeBuilder quantize("QuantizeLinear", 28);
    quantize.input(TESS_ELEMENT_FLOAT32, shape).input(TESS_ELEMENT_FLOAT32, Shape{}).input(type, Shape{}).output();
    const ValueHandle q =
        run_node(registry(), quantize, {tensor<float>(shape, x), testing::scalar(2.0f), zero_point})[0];
    const std::vector<uint8_t> codes = codes_of(*q);
    const std::vector<double> expected{1.5, 2.0, 0.0, 2.75};  // 1.5 + x / 2
    for (size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(value_of_code(kFloat6Types[0], codes[i]), expected[i]) << "element " << i;
    NodeBuilder dequantize("DequantizeLinear", 28);
    dequantize.input(type, shape).input(TESS_ELEMENT_FLOAT32, Shape{}).input(type, Shape{}).output();
    const ValueHandle y = run_node(registry(), dequantize, {q, testing::scalar(2.0f), zero_point})[0];
    EXPECT_EQ(values_of<float>(*y), (std::vector<float>{0.0f, 1.0f, -3.0f, 2.5f}));
}

TEST(Float6, BlockQuantizationWithPowerOfTwoScales) {
    // The MX layout: blocks of elements along the last axis share one float8e8m0 scale (a power of two).
    const int32_t type = TESS_ELEMENT_FLOAT6E3M2;
    const Shape shape{2, 8};
    const std::vector<float> x{0.1f, -0.3f, 1.0f, 2.0f, 100.0f, -50.0f, 3.0f, 0.0f,
                               7.0f, 9.0f,  -11.0f, 0.5f, 0.25f, 0.125f, -0.0625f, 1e6f};
    const std::vector<uint8_t> scale_codes{127 - 2, 127 + 2, 127, 127 - 3};  // 2^-2, 2^2, 2^0, 2^-3
    ValueHandle scales = testing::make_tensor_value(TESS_ELEMENT_FLOAT8E8M0, {2, 2});
    std::memcpy(scales->bytes.data(), scale_codes.data(), scale_codes.size());
    NodeBuilder quantize("QuantizeLinear", 28);
    quantize.input(TESS_ELEMENT_FLOAT32, shape).input(TESS_ELEMENT_FLOAT8E8M0, Shape{2, 2}).output();
    quantize.attr_int("axis", 1).attr_int("block_size", 4).attr_int("output_dtype", type);
    const ValueHandle q = run_node(registry(), quantize, {tensor<float>(shape, x), scales})[0];
    const std::vector<uint8_t> codes = codes_of(*q);
    NodeBuilder dequantize("DequantizeLinear", 28);
    dequantize.input(type, shape).input(TESS_ELEMENT_FLOAT8E8M0, Shape{2, 2}).output();
    dequantize.attr_int("axis", 1).attr_int("block_size", 4);
    const std::vector<float> back = values_of<float>(*run_node(registry(), dequantize, {q, scales})[0]);
    for (size_t i = 0; i < x.size(); ++i) {
        const double scale = std::ldexp(1.0, int(scale_codes[(i / 8) * 2 + (i % 8) / 4]) - 127);
        EXPECT_EQ(codes[i], encode(type, double(x[i]) / scale)) << "element " << i;
        EXPECT_EQ(back[i], value_of_code(kFloat6Types[1], codes[i]) * scale) << "element " << i;
    }
}

}  // namespace
}  // namespace tessera::cpu
