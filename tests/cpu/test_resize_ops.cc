// Resize (opset 19) on 4-D NCHW float inputs against a plain reference of the ONNX definition (the formulas of
// onnx/reference/ops/op_resize.py): per output position the coordinate transformation gives x_original, the filter
// takes its neighbours (edge-replicated outside the input) with the mode's coefficients, and the 2-D result is the
// product of the two axes' weights.  Nearest (every nearest_mode), linear (every coordinate mode) and cubic
// (cubic_coeff_a, exclude_outside), from scales and from sizes, up- and down-sampling, sizes 1 and odd.
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

struct ResizeAttrs {
    std::string mode = "nearest";
    std::string coordinates = "half_pixel";
    std::string nearest_mode = "round_prefer_floor";
    double cubic_a = -0.75;
    bool exclude_outside = false;
};

// One axis: output position -> (input index, weight) pairs.
using Taps = std::vector<std::vector<std::pair<int64_t, double>>>;

double original_coordinate(const ResizeAttrs& a, double x, double scale, int64_t in, int64_t out) {
    const double length = scale * double(in);  // the spec's output_width: scale * input, not the rounded size
    const std::string& m = a.coordinates;
    if (m == "half_pixel") return (x + 0.5) / scale - 0.5;
    if (m == "half_pixel_symmetric") {
        const double offset = double(in) / 2 * (1 - double(out) / length);
        return offset + (x + 0.5) / scale - 0.5;
    }
    if (m == "pytorch_half_pixel") return length == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    if (m == "align_corners") return length == 1 ? 0.0 : x * double(in - 1) / (length - 1);
    if (m == "asymmetric") return x / scale;
    ADD_FAILURE() << "unknown coordinate mode " << m;
    return 0;
}

// The coefficients of the spec's filters for the fractional position `ratio` in (0, 1] (1 when x_original is an
// integer), applied to the neighbours floor - 1 .. floor + 2 (cubic), floor .. floor + 1 (linear, nearest).
std::vector<double> coefficients(const ResizeAttrs& a, double ratio) {
    if (a.mode == "linear") return {1 - ratio, ratio};
    if (a.mode == "cubic") {
        const double A = a.cubic_a;
        auto far = [&](double s) { return ((A * s - 5 * A) * s + 8 * A) * s - 4 * A; };  // 1 < |s| < 2
        auto near = [&](double s) { return ((A + 2) * s - (A + 3)) * s * s + 1; };       // |s| <= 1
        return {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
    }
    if (ratio == 1) return {0, 1};
    const std::string& m = a.nearest_mode;
    if (m == "round_prefer_floor") return ratio <= 0.5 ? std::vector<double>{1, 0} : std::vector<double>{0, 1};
    if (m == "round_prefer_ceil") return ratio < 0.5 ? std::vector<double>{1, 0} : std::vector<double>{0, 1};
    if (m == "floor") return {1, 0};
    return {0, 1};  // ceil
}

Taps axis_taps(const ResizeAttrs& a, double scale, int64_t in, int64_t out) {
    Taps taps(static_cast<size_t>(out));
    for (int64_t y = 0; y < out; ++y) {
        const double x = original_coordinate(a, double(y), scale, in, out);
        const double whole = std::floor(x);
        const double ratio = x == whole ? 1.0 : x - whole;
        // With ratio 1 the spec's neighbours are those of the interval ending at x.
        const int64_t base = x == whole ? int64_t(whole) - 1 : int64_t(whole);
        std::vector<double> w = coefficients(a, ratio);
        const int64_t first = a.mode == "cubic" ? base - 1 : base;
        if (a.exclude_outside) {
            double sum = 0;
            for (size_t k = 0; k < w.size(); ++k) {
                const int64_t i = first + int64_t(k);
                if (i < 0 || i >= in) w[k] = 0;
                sum += w[k];
            }
            for (double& v : w) v /= sum;
        }
        for (size_t k = 0; k < w.size(); ++k) {
            taps[size_t(y)].push_back({std::clamp<int64_t>(first + int64_t(k), 0, in - 1), w[k]});  // edge padding
        }
    }
    return taps;
}

std::vector<double> reference_resize(const ResizeAttrs& a, const Shape& in, const std::vector<float>& x,
                                     const Shape& out, double scale_h, double scale_w) {
    const Taps th = axis_taps(a, scale_h, in[2], out[2]), tw = axis_taps(a, scale_w, in[3], out[3]);
    std::vector<double> y(size_t(shape_size(out)));
    for (int64_t nc = 0; nc < in[0] * in[1]; ++nc) {
        const float* plane = &x[nc * in[2] * in[3]];
        for (int64_t i = 0; i < out[2]; ++i) {
            for (int64_t j = 0; j < out[3]; ++j) {
                double sum = 0;
                for (const auto& [ih, wh] : th[size_t(i)])
                    for (const auto& [iw, ww] : tw[size_t(j)]) sum += wh * ww * plane[ih * in[3] + iw];
                y[(nc * out[2] + i) * out[3] + j] = sum;
            }
        }
    }
    return y;
}

// sizes empty: resize by `scales` (H and W; N and C unscaled), else to `sizes` (H and W).
void check_resize(const ResizeAttrs& a, const Shape& in, std::vector<float> scales, std::vector<int64_t> sizes,
                  uint32_t seed) {
    const auto x = random_values<float>(shape_size(in), seed);
    NodeBuilder node("Resize", 19);
    node.input(TESS_ELEMENT_FLOAT32).omitted_input();
    std::vector<ValueHandle> inputs{tensor<float>(in, x), nullptr};
    Shape out{in[0], in[1]};
    double scale_h, scale_w;
    if (sizes.empty()) {
        node.input(TESS_ELEMENT_FLOAT32);
        inputs.push_back(tensor<float>({4}, {1.0f, 1.0f, scales[0], scales[1]}));
        // The scales as the kernel reads them: float values widened to double.
        scale_h = double(scales[0]);
        scale_w = double(scales[1]);
        out.push_back(int64_t(std::floor(scale_h * double(in[2]))));
        out.push_back(int64_t(std::floor(scale_w * double(in[3]))));
    } else {
        node.omitted_input().input(TESS_ELEMENT_INT64);
        inputs.push_back(nullptr);
        inputs.push_back(tensor<int64_t>({4}, {in[0], in[1], sizes[0], sizes[1]}));
        out.push_back(sizes[0]);
        out.push_back(sizes[1]);
        scale_h = double(sizes[0]) / double(in[2]);
        scale_w = double(sizes[1]) / double(in[3]);
    }
    node.output(TESS_ELEMENT_FLOAT32).attr_string("mode", a.mode);
    node.attr_string("coordinate_transformation_mode", a.coordinates);
    if (a.mode == "nearest") node.attr_string("nearest_mode", a.nearest_mode);
    if (a.mode == "cubic") {
        node.attr_float("cubic_coeff_a", float(a.cubic_a));
        node.attr_int("exclude_outside", a.exclude_outside ? 1 : 0);
    }
    const auto outputs = run_node(testing::registry_with<register_resize_kernels>(), node, inputs);
    const std::string what = a.mode + " " + a.coordinates + " " + a.nearest_mode + " a=" + std::to_string(a.cubic_a) +
                             " exclude=" + std::to_string(a.exclude_outside) + " in=" + shape_string(in) +
                             " out=" + shape_string(out) + (sizes.empty() ? " (scales)" : " (sizes)");
    ASSERT_EQ(dims_of(outputs[0]), out) << what;
    const auto expected = reference_resize(a, in, x, out, scale_h, scale_w);
    const auto got = values_of<float>(*outputs[0]);
    // Nearest is a gather: exact.  Filters: float arithmetic on values of magnitude about 1.
    if (a.mode == "nearest") {
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(double(got[i]), expected[i]) << what << " element " << i;
    } else {
        expect_near_all(got, expected, 1e-5, what);
    }
}

const Shape kInputs[] = {{1, 1, 1, 1}, {1, 2, 3, 5}, {2, 3, 7, 8}, {1, 1, 16, 9}, {1, 4, 5, 1}};
const std::vector<float> kScales[] = {{2.0f, 3.0f}, {0.5f, 0.6f}, {1.7f, 0.75f}, {1.0f, 2.5f}, {3.0f, 1.0f}};
const std::vector<int64_t> kSizes[] = {{1, 1}, {4, 9}, {13, 3}, {6, 11}};

void check_all_shapes(const ResizeAttrs& a, uint32_t seed) {
    for (const Shape& in : kInputs) {
        for (const auto& s : kScales) {
            // Downsampling to zero rows would leave nothing to compare.
            if (std::floor(s[0] * in[2]) < 1 || std::floor(s[1] * in[3]) < 1) continue;
            check_resize(a, in, s, {}, ++seed);
            if (::testing::Test::HasFatalFailure()) return;
        }
        for (const auto& s : kSizes) {
            check_resize(a, in, {}, s, ++seed);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

TEST(ResizeOps, NearestModes) {
    for (const char* coordinates : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
        for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
            check_all_shapes({.mode = "nearest", .coordinates = coordinates, .nearest_mode = rounding}, 100);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(ResizeOps, LinearCoordinateModes) {
    for (const char* coordinates :
         {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric"}) {
        check_all_shapes({.mode = "linear", .coordinates = coordinates}, 200);
        if (HasFatalFailure()) return;
    }
}

TEST(ResizeOps, CubicCoefficientsAndExcludeOutside) {
    for (const char* coordinates : {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"}) {
        for (double a : {-0.75, -0.5}) {
            for (bool exclude : {false, true}) {
                check_all_shapes({.mode = "cubic", .coordinates = coordinates, .cubic_a = a, .exclude_outside = exclude},
                                 300);
                if (HasFatalFailure()) return;
            }
        }
    }
}

}  // namespace
}  // namespace tessera::cpu
