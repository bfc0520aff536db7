// The plugin support layer (plugin_api/include/tessera/support/), built as C++17 against the public headers alone,
// the way a vendor builds it: float16/bfloat16 against plain references, the element-type table, the exception
// guard, the entry helper's ABI negotiation at both edges and with older struct sizes, and TensorView's checks.
// A fake host table stands in for the core.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessera/plugin_support.hpp"

namespace {

using namespace tessera::support;

// ---- A fake host: statuses and tensors -----------------------------------------------------------------------

struct FakeStatus {
    int32_t code;
    std::string message;
};
struct FakeTensor {
    int32_t kind = TESS_VALUE_TENSOR;
    int32_t type = TESS_ELEMENT_FLOAT32;
    std::vector<int64_t> dims;
    std::vector<unsigned char> bytes;
};

TessStatus* fake_status_create(int32_t code, const char* message) {
    return reinterpret_cast<TessStatus*>(new FakeStatus{code, message});
}
int32_t fake_status_code(const TessStatus* s) { return reinterpret_cast<const FakeStatus*>(s)->code; }
const char* fake_status_message(const TessStatus* s) { return reinterpret_cast<const FakeStatus*>(s)->message.c_str(); }
void fake_status_release(TessStatus* s) { delete reinterpret_cast<FakeStatus*>(s); }

const FakeTensor& tensor(const TessValue* v) { return *reinterpret_cast<const FakeTensor*>(v); }
int32_t fake_kind(const TessValue* v) { return tensor(v).kind; }
int32_t fake_type(const TessValue* v) { return tensor(v).type; }
size_t fake_rank(const TessValue* v) { return tensor(v).dims.size(); }
const int64_t* fake_dims(const TessValue* v) { return tensor(v).dims.data(); }
size_t fake_count(const TessValue* v) {
    size_t n = 1;
    for (int64_t d : tensor(v).dims) n *= size_t(d);
    return n;
}
size_t fake_bytes(const TessValue* v) { return tensor(v).bytes.size(); }
const void* fake_const_data(const TessValue* v) { return tensor(v).bytes.data(); }
void* fake_data(TessValue* v) { return reinterpret_cast<FakeTensor*>(v)->bytes.data(); }

TessHostApi make_host(uint32_t abi_min, uint32_t abi_max) {
    TessHostApi host{};
    host.struct_size = sizeof host;
    host.abi_version_min = abi_min;
    host.abi_version_max = abi_max;
    host.status_create = fake_status_create;
    host.status_code = fake_status_code;
    host.status_message = fake_status_message;
    host.status_release = fake_status_release;
    host.value_kind = fake_kind;
    host.value_element_type = fake_type;
    host.tensor_rank = fake_rank;
    host.tensor_dims = fake_dims;
    host.tensor_element_count = fake_count;
    host.tensor_byte_size = fake_bytes;
    host.tensor_const_data = fake_const_data;
    host.tensor_data = fake_data;
    return host;
}

// Takes a status apart (and releases it); code -1 for NULL.
std::pair<int32_t, std::string> take(TessStatus* status) {
    if (status == nullptr) return {-1, ""};
    auto result = std::make_pair(fake_status_code(status), std::string(fake_status_message(status)));
    fake_status_release(status);
    return result;
}

// ---- float16 / bfloat16 --------------------------------------------------------------------------------------

// Plain references: decode from the format's definition; encode by searching the nearest representable value
// (ties to the even code), computed in double.
double half_reference_value(uint16_t h) {
    const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
    if (exponent == 0) return sign * std::ldexp(mantissa, -24);
    return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

uint16_t half_reference_encode(float f) {
    if (std::isnan(f)) return 0x7e00;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(double(f));
    if (a >= 65520.0) return sign | 0x7c00;  // rounds past the largest finite half (65504)
    uint16_t best = 0;
    double best_error = INFINITY;
    for (uint32_t code = 0; code < 0x7c00; ++code) {
        const double error = std::fabs(half_reference_value(uint16_t(code)) - a);
        if (error < best_error || (error == best_error && (code & 1) == 0)) {
            best = uint16_t(code);
            best_error = error;
        }
    }
    return sign | best;
}

TEST(PluginSupportFloat16, EveryHalfDecodesToItsValue) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const double expected = half_reference_value(uint16_t(h));
        const float got = half_to_float(uint16_t(h));
        if (std::isnan(expected)) {
            EXPECT_TRUE(std::isnan(got)) << std::hex << h;
        } else {
            EXPECT_EQ(double(got), expected) << std::hex << h;
            EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
        }
        // Every half survives the round trip (NaNs stay NaNs).
        const uint16_t back = float_to_half(got);
        if (std::isnan(expected)) EXPECT_TRUE(std::isnan(half_to_float(back)));
        else EXPECT_EQ(back, h) << std::hex << h;
    }
}

TEST(PluginSupportFloat16, FloatsRoundToTheNearestHalfTiesToEven) {
    std::vector<float> values = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, INFINITY, -INFINITY,
                                 5.960464477539063e-08f, 2.9802322387695312e-08f, 2.98023259e-08f, 6.1035156e-05f,
                                 6.0975552e-05f, 1.00048828125f, 1.000732421875f, 1.0009765625f};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> exponent(-26.0f, 17.0f);
    for (int i = 0; i < 3000; ++i) values.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
    for (uint32_t h = 0; h < 0x7c00; h += 97) {  // exact midpoints between neighbouring halves
        const double mid = (half_reference_value(uint16_t(h)) + half_reference_value(uint16_t(h + 1))) / 2;
        values.push_back(float(mid));
    }
    for (float f : values) EXPECT_EQ(float_to_half(f), half_reference_encode(f)) << f;
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(PluginSupportFloat16, BFloat16RoundsToNearestEven) {
    std::mt19937 rng(11);
    for (int i = 0; i < 20000; ++i) {
        uint32_t bits = rng();
        float f;
        std::memcpy(&f, &bits, sizeof f);
        const uint16_t b = float_to_bfloat16(f);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bfloat16_to_float(b)));
            continue;
        }
        // Reference: the two bfloat16 neighbours (truncation and the next code up), nearest wins, ties to even.
        const uint16_t low = uint16_t(bits >> 16), high = uint16_t(low + 1);
        const double a = double(f), dl = std::fabs(double(bfloat16_to_float(low)) - a),
                     dh = std::fabs(double(bfloat16_to_float(high)) - a);
        const uint16_t expected = dl < dh ? low : dh < dl ? high : ((low & 1) ? high : low);
        if ((bits & 0xffff) == 0) EXPECT_EQ(b, low);
        else EXPECT_EQ(b, expected) << std::hex << bits;
    }
}

// ---- element types -------------------------------------------------------------------------------------------

TEST(PluginSupportElementTypes, NamesAndSizes) {
    EXPECT_STREQ(element_type_name(TESS_ELEMENT_FLOAT32), "float");
    EXPECT_STREQ(element_type_name(TESS_ELEMENT_FLOAT16), "float16");
    EXPECT_STREQ(element_type_name(TESS_ELEMENT_BFLOAT16), "bfloat16");
    EXPECT_STREQ(element_type_name(TESS_ELEMENT_UNDEFINED), "undefined");
    EXPECT_STREQ(element_type_name(999), "undefined");
    EXPECT_EQ(element_size(TESS_ELEMENT_INT64), 8u);
    EXPECT_EQ(element_size(TESS_ELEMENT_COMPLEX128), 16u);
    EXPECT_EQ(element_size(TESS_ELEMENT_INT4), 0u);
    EXPECT_EQ(element_storage_bytes(TESS_ELEMENT_INT4, 3), 2u);
    EXPECT_EQ(element_storage_bytes(TESS_ELEMENT_FLOAT6E2M3, 4), 3u);
    EXPECT_EQ(element_storage_bytes(TESS_ELEMENT_STRING, 5), 0u);
    std::vector<std::string> names;
    for (int32_t t = TESS_ELEMENT_FLOAT32; t <= TESS_ELEMENT_FLOAT6E3M2; ++t) {
        const ElementTypeInfo info = element_type_info(t);
        EXPECT_STRNE(info.name, "undefined") << t;
        if (t != TESS_ELEMENT_STRING) {
            EXPECT_GT(info.bits, 0u) << t;
        }
        if (info.bytes != 0) {
            EXPECT_EQ(info.bits, info.bytes * 8) << t;
        }
        for (const std::string& n : names) EXPECT_NE(n, info.name) << t;
        names.push_back(info.name);
    }
    static_assert(element_type_info(TESS_ELEMENT_FLOAT64).bytes == 8, "constexpr");
    const int64_t dims[] = {1, -1, 224};
    EXPECT_EQ(shape_string(dims, 3), "[1,?,224]");
    EXPECT_EQ(shape_string(dims, 0), "[]");
}

// ---- guarded -------------------------------------------------------------------------------------------------

TEST(PluginSupportStatus, GuardedTurnsEveryExceptionIntoAStatus) {
    const TessHostApi host = make_host(1, 1);
    EXPECT_EQ(take(guarded(&host, "p", [] {})).first, -1);
    EXPECT_EQ(take(guarded(&host, "p", [&]() -> TessStatus* { return host.status_create(7, "mine"); })),
              std::make_pair(7, std::string("mine")));
    EXPECT_EQ(take(guarded(&host, "p", [] { fail(TESS_STATUS_RUNTIME_ERROR, "kernel broke"); })),
              std::make_pair(int32_t(TESS_STATUS_RUNTIME_ERROR), std::string("kernel broke")));
    EXPECT_EQ(take(guarded(&host, "p", [] { throw std::bad_alloc(); })),
              std::make_pair(int32_t(TESS_STATUS_OUT_OF_MEMORY), std::string("p: out of memory")));
    EXPECT_EQ(take(guarded(&host, "p", [] { throw std::logic_error("bug"); })),
              std::make_pair(int32_t(TESS_STATUS_INTERNAL), std::string("p: bug")));
    EXPECT_EQ(take(guarded(&host, nullptr, [] { throw 42; })),
              std::make_pair(int32_t(TESS_STATUS_INTERNAL), std::string("unknown exception")));
}

TEST(PluginSupportStatus, ThrowIfErrorKeepsTheCodeAndReleasesTheStatus) {
    const TessHostApi host = make_host(1, 1);
    EXPECT_NO_THROW(throw_if_error(&host, nullptr));
    try {
        throw_if_error(&host, host.status_create(TESS_STATUS_OUT_OF_MEMORY, "no room"), "output 0");
        FAIL() << "no exception";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_OUT_OF_MEMORY);
        EXPECT_STREQ(e.what(), "output 0: no room");
    }
}

// ---- enter_plugin --------------------------------------------------------------------------------------------

const TessProviderApi kNoProvider{};
const TessProviderApi* const kProviders[] = {&kNoProvider};
const TessCustomOpApi kNoOp{};
const TessCustomOpApi* const kOps[] = {&kNoOp};

PluginDescription description(uint32_t abi_min = 1, uint32_t abi_max = 1, bool with_ops = false) {
    PluginDescription d;
    d.name = "test-plugin";
    d.version = "9.9";
    d.providers = kProviders;
    d.provider_count = 1;
    if (with_ops) {
        d.custom_ops = kOps;
        d.custom_op_count = 1;
    }
    d.abi_version_min = abi_min;
    d.abi_version_max = abi_max;
    return d;
}

TEST(PluginSupportEntry, NegotiatesTheHighestCommonVersion) {
    EXPECT_EQ(negotiate_abi_version(1, 3, 2, 5), 3u);
    EXPECT_EQ(negotiate_abi_version(2, 5, 1, 3), 3u);
    EXPECT_EQ(negotiate_abi_version(1, 1, 1, 1), 1u);
    EXPECT_EQ(negotiate_abi_version(2, 4, 1, 1), 0u);  // the core is newer than the plugin
    EXPECT_EQ(negotiate_abi_version(1, 1, 2, 3), 0u);  // the core is older

    const TessHostApi host = make_host(1, 3);
    TessPluginExports exports{};
    exports.struct_size = sizeof exports;
    std::once_flag once;
    int inits = 0;
    EXPECT_EQ(take(enter_plugin(&host, &exports, description(1, 2), once, [&] { ++inits; })).first, -1);
    EXPECT_EQ(exports.abi_version, 2u);
    EXPECT_STREQ(exports.name, "test-plugin");
    EXPECT_EQ(exports.provider_count, 1u);
    EXPECT_EQ(exports.providers, kProviders);
    // A second environment's entry call: exports filled again, initialization not repeated.
    TessPluginExports again{};
    again.struct_size = sizeof again;
    EXPECT_EQ(take(enter_plugin(&host, &again, description(1, 2), once, [&] { ++inits; })).first, -1);
    EXPECT_EQ(inits, 1);
    EXPECT_EQ(again.abi_version, 2u);
}

TEST(PluginSupportEntry, RefusesCoresOutsideItsRangeAtBothEdges) {
    for (auto range : {std::make_pair(2u, 4u), std::make_pair(0u, 0u)}) {
        const TessHostApi host = make_host(range.first, range.second);
        TessPluginExports exports{};
        exports.struct_size = sizeof exports;
        std::once_flag once;
        bool initialized = false;
        auto [code, message] = take(enter_plugin(&host, &exports, description(), once, [&] { initialized = true; }));
        EXPECT_EQ(code, TESS_STATUS_ABI_MISMATCH);
        EXPECT_NE(message.find("test-plugin speaks plugin ABI 1..1"), std::string::npos) << message;
        EXPECT_FALSE(initialized);
        EXPECT_EQ(exports.providers, nullptr);
    }
}

TEST(PluginSupportEntry, WritesOnlyTheFieldsAnOlderCoresTableHas) {
    // An older core's exports table ends before `shutdown`: the helper must not write past it.
    const size_t old_size = offsetof(TessPluginExports, shutdown);
    std::vector<unsigned char> buffer(sizeof(TessPluginExports) + 16, 0xab);
    auto* exports = reinterpret_cast<TessPluginExports*>(buffer.data());
    std::memset(buffer.data(), 0, old_size);
    exports->struct_size = old_size;
    const TessHostApi host = make_host(1, 1);
    std::once_flag once;
    EXPECT_EQ(take(enter_plugin(&host, exports, description(), once, [] {})).first, -1);
    EXPECT_EQ(exports->providers, kProviders);
    for (size_t i = old_size; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], 0xab) << "byte " << i << " was written";
    // Custom operators need the fields such a core lacks: refused, not silently dropped.
    std::once_flag once_ops;
    EXPECT_EQ(take(enter_plugin(&host, exports, description(1, 1, true), once_ops, [] {})).first,
              TESS_STATUS_ABI_MISMATCH);
}

TEST(PluginSupportEntry, AFailedInitializationIsReportedAndRetried) {
    const TessHostApi host = make_host(1, 1);
    TessPluginExports exports{};
    exports.struct_size = sizeof exports;
    std::once_flag once;
    int attempts = 0;
    auto init = [&] {
        if (++attempts == 1) fail(TESS_STATUS_UNAVAILABLE, "no device yet");
    };
    EXPECT_EQ(take(enter_plugin(&host, &exports, description(), once, init)),
              std::make_pair(int32_t(TESS_STATUS_UNAVAILABLE), std::string("no device yet")));
    EXPECT_EQ(take(enter_plugin(&host, &exports, description(), once, init)).first, -1);
    EXPECT_EQ(attempts, 2);
    EXPECT_EQ(enter_plugin(nullptr, &exports, description(), once, init), nullptr);  // nothing to report through
}

// ---- TensorView ----------------------------------------------------------------------------------------------

TEST(PluginSupportTensor, TypedAccessIsChecked) {
    const TessHostApi host = make_host(1, 1);
    FakeTensor t;
    t.dims = {2, 3};
    t.bytes.resize(6 * sizeof(float));
    const auto* value = reinterpret_cast<const TessValue*>(&t);
    const TensorView view(&host, value);
    EXPECT_EQ(view.rank(), 2u);
    EXPECT_EQ(view.dim(1), 3);
    EXPECT_EQ(view.element_count(), 6u);
    EXPECT_EQ(view.shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(view.describe(), "float [2,3]");
    EXPECT_EQ(static_cast<const void*>(view.data<float>()), t.bytes.data());
    try {
        view.data<int64_t>();
        FAIL() << "no exception";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), TESS_STATUS_INVALID_ARGUMENT);
        EXPECT_STREQ(e.what(), "a tensor of int64 was expected, got float [2,3]");
    }
    FakeTensor sequence;
    sequence.kind = TESS_VALUE_SEQUENCE;
    EXPECT_THROW(TensorView(&host, reinterpret_cast<const TessValue*>(&sequence)), Error);
    EXPECT_THROW(TensorView(&host, nullptr), Error);
}

}  // namespace
