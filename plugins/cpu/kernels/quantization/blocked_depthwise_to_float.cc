// CPU provider: ConvIntegerToFloat's depthwise convolutions on the blocked float kernels (see the header).
#include "kernels/quantization/blocked_depthwise_to_float.h"

#include <algorithm>

#include "util/blocked_conv.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

// Rows of the blocked depthwise convolution's sums through the epilogue into NCHW planes of Y.
class PlaneSink final : public BlockedBandSink {
public:
    PlaneSink(const quant::FloatEpilogue& e, float* y, int64_t C, const WindowGeometry& g)
        : e_(e), y_(y), C_(C), positions_(g.output[0] * g.output[1]), OW_(g.output[1]) {}
    void take(int64_t n, int64_t block, int64_t oh0, int64_t oh1, const float* rows) const override {
        const int64_t count = (oh1 - oh0) * OW_, c0 = block * kChannelBlock;
        quant::float_rows_from_blocked(rows, count, c0, e_, y_ + (n * C_ + c0) * positions_ + oh0 * OW_, positions_);
    }

private:
    const quant::FloatEpilogue& e_;
    float* y_;
    int64_t C_, positions_, OW_;
};

// The rows of a float32 X quantized and centered into the ring as the convolution asks for them.
class QuantizingRowMaker final : public BlockedRowMaker {
public:
    QuantizingRowMaker(const Tensor& X, quant::DynamicQuantization q) : X_(X), q_(q) {}
    void make_rows(int64_t n, int64_t row_begin, int64_t row_end, const BlockedRing& ring) const override {
        const int64_t C = X_.shape[1], W = X_.shape[3], P = X_.shape[2] * W;
        const float zero = static_cast<float>(q_.zero_point);
        for (int64_t b = 0; b < C / kChannelBlock; ++b) {
            const float* planes = X_.ptr<float>() + (n * C + b * kChannelBlock) * P;
            // Rows that follow each other in the ring (up to where it wraps) in one call.
            for (int64_t r = row_begin; r < row_end;) {
                const int64_t rows = std::min(row_end - r, ring.ring_rows - r % ring.ring_rows);
                quantize_centered_to_blocked(planes + r * W, P, rows * W, q_.scale, zero, ring.at(b, r, 0));
                r += rows;
            }
        }
    }

private:
    const Tensor& X_;
    quant::DynamicQuantization q_;
};

}  // namespace

void blocked_depthwise_to_float(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, const Tensor& X,
                                int32_t x_zero, const quant::FloatEpilogue& epilogue, float* y) {
    const int64_t N = X.shape[0], C = X.shape[1], P = X.shape[2] * X.shape[3];
    float* centered = thread_scratch_buffer<float, 43>(N * C * P);
    const float zero = static_cast<float>(x_zero);
    dispatch<int8_t, uint8_t>(X.type, [&]<typename TX>() {
        const TX* x = X.ptr<TX>();
        pool.parallel_for(N * (C / kChannelBlock), 1, [&](int64_t first, int64_t last) {
            for (int64_t b = first; b < last; ++b)
                dequantize_to_blocked(x + b * kChannelBlock * P, P, P, 1.0f, zero, centered + b * kChannelBlock * P);
        });
    });
    const PlaneSink sink(epilogue, y, C, g);
    blocked_depthwise2d(pool, g, packed_w, N, C, centered, nullptr, nullptr, nullptr, nullptr, &sink);
}

void blocked_depthwise_quantizing_to_float(ThreadPool& pool, const WindowGeometry& g, const float* packed_w,
                                           const Tensor& X, quant::DynamicQuantization q,
                                           const quant::FloatEpilogue& epilogue, float* y) {
    const int64_t N = X.shape[0], C = X.shape[1], P = X.shape[2] * X.shape[3];
    const PlaneSink sink(epilogue, y, C, g);
    if (C * P * static_cast<int64_t>(sizeof(float)) >= kTakenOverMinBytes) {
        const QuantizingRowMaker maker(X, q);
        blocked_rows_window2d(pool, maker, C, g, packed_w, nullptr, nullptr, N, nullptr, &sink);
        return;
    }
    float* centered = thread_scratch_buffer<float, 43>(N * C * P);
    const float zero = static_cast<float>(q.zero_point);
    pool.parallel_for(N * (C / kChannelBlock), 1, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b)
            quantize_centered_to_blocked(X.ptr<float>() + b * kChannelBlock * P, P, P, q.scale, zero,
                                         centered + b * kChannelBlock * P);
    });
    blocked_depthwise2d(pool, g, packed_w, N, C, centered, nullptr, nullptr, nullptr, nullptr, &sink);
}

}  // namespace tessera::cpu
