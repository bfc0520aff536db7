// CPU provider: the recurrent layers RNN, GRU and LSTM, opsets 7-13 and 14+ (14 adds the `layout` attribute;
// later versions only add element types).
//
// One driver runs all three cells, one direction after the other (or side by side, one thread each).  The input
// projections X_t x W^T of many steps are one GEMM (blocks of steps sized to stay in cache); each step then
// computes the recurrent product H_t-1 x R^T for the whole batch and applies the cell's gate equations row by
// row.  For float, R is laid out once (at session creation when it is a constant) in column panels that a
// register-blocked kernel multiplies without any per-step packing; BLAS does the other products.  Batch rows
// past their sequence length stop updating and emit zeros.  float16/bfloat16 run in float.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/cpu_isa.h"
#include "util/data_movement.h"
#include "util/float16_compute.h"
#include "util/gemm.h"
#include "util/type_list.h"
#include "util/vec_math.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

// ---- Activation functions --------------------------------------------------------------------------------------

enum class ActivationKind {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus
};

struct Activation {
    ActivationKind kind = ActivationKind::Tanh;
    float alpha = 0;
    float beta = 0;
};

// The activation names the ONNX recurrent ops accept, which of alpha/beta each one reads, and their defaults
// (those of the ONNX operator of the same name).
struct ActivationSpec {
    std::string_view name;
    ActivationKind kind;
    bool uses_alpha;
    bool uses_beta;
    float default_alpha;
    float default_beta;
};

constexpr ActivationSpec kActivationSpecs[] = {
    {"relu", ActivationKind::Relu, false, false, 0.0f, 0.0f},
    {"tanh", ActivationKind::Tanh, false, false, 0.0f, 0.0f},
    {"sigmoid", ActivationKind::Sigmoid, false, false, 0.0f, 0.0f},
    {"affine", ActivationKind::Affine, true, true, 1.0f, 0.0f},
    {"leakyrelu", ActivationKind::LeakyRelu, true, false, 0.01f, 0.0f},
    {"thresholdedrelu", ActivationKind::ThresholdedRelu, true, false, 1.0f, 0.0f},
    {"scaledtanh", ActivationKind::ScaledTanh, true, true, 1.0f, 1.0f},
    {"hardsigmoid", ActivationKind::HardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", ActivationKind::Elu, true, false, 1.0f, 0.0f},
    {"softsign", ActivationKind::Softsign, false, false, 0.0f, 0.0f},
    {"softplus", ActivationKind::Softplus, false, false, 0.0f, 0.0f},
};

std::string lowercase(std::string_view text) {
    std::string out(text);
    for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return out;
}

// Parses `names` (case-insensitive).  activation_alpha / activation_beta values are consumed in order by the
// activations that take that parameter, the others skip them (as ONNX Runtime reads them); missing values take
// the operator defaults.
std::vector<Activation> parse_activations(const std::string& op, const std::vector<std::string>& names,
                                          const std::vector<float>& alphas, const std::vector<float>& betas) {
    std::vector<Activation> out;
    size_t next_alpha = 0, next_beta = 0;
    for (const std::string& name : names) {
        const std::string key = lowercase(name);
        const auto* spec = std::find_if(std::begin(kActivationSpecs), std::end(kActivationSpecs),
                                        [&](const ActivationSpec& s) { return s.name == key; });
        if (spec == std::end(kActivationSpecs)) throw KernelError(op + ": unsupported activation '" + name + "'");
        Activation a{spec->kind, spec->default_alpha, spec->default_beta};
        if (spec->uses_alpha && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
        if (spec->uses_beta && next_beta < betas.size()) a.beta = betas[next_beta++];
        out.push_back(a);
    }
    return out;
}

template <typename T> T softplus(T x) {
    // log(1 + e^x) without overflow for large x.
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Vector forms for vec::map, always inlined: 16-lane values must not cross a real call.
struct VectorSigmoid {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::sigmoid(v); }
};
struct VectorTanh {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::tanh(v); }
};

// x[k] = f(x[k]) for k < n.  Sigmoid and tanh, the common gates, are vectorized for float.
template <typename T> void activate(const Activation& f, T* x, int64_t n) {
    const T alpha = T(f.alpha), beta = T(f.beta);
    switch (f.kind) {
        case ActivationKind::Sigmoid:
            if constexpr (std::is_same_v<T, float>) {
                vec::run_best_isa([&] { vec::map(x, x, n, VectorSigmoid{}); });
            } else {
                for (int64_t k = 0; k < n; ++k) x[k] = T(1) / (T(1) + std::exp(-x[k]));
            }
            return;
        case ActivationKind::Tanh:
            if constexpr (std::is_same_v<T, float>) {
                vec::run_best_isa([&] { vec::map(x, x, n, VectorTanh{}); });
            } else {
                for (int64_t k = 0; k < n; ++k) x[k] = std::tanh(x[k]);
            }
            return;
        case ActivationKind::Relu:
            for (int64_t k = 0; k < n; ++k) x[k] = x[k] > T(0) ? x[k] : T(0);
            return;
        case ActivationKind::Affine:
            for (int64_t k = 0; k < n; ++k) x[k] = alpha * x[k] + beta;
            return;
        case ActivationKind::LeakyRelu:
            for (int64_t k = 0; k < n; ++k) x[k] = x[k] >= T(0) ? x[k] : alpha * x[k];
            return;
        case ActivationKind::ThresholdedRelu:
            for (int64_t k = 0; k < n; ++k) x[k] = x[k] > alpha ? x[k] : T(0);
            return;
        case ActivationKind::ScaledTanh:
            for (int64_t k = 0; k < n; ++k) x[k] = alpha * std::tanh(beta * x[k]);
            return;
        case ActivationKind::HardSigmoid:
            for (int64_t k = 0; k < n; ++k) x[k] = std::min(T(1), std::max(T(0), alpha * x[k] + beta));
            return;
        case ActivationKind::Elu:
            for (int64_t k = 0; k < n; ++k) x[k] = x[k] >= T(0) ? x[k] : alpha * (std::exp(x[k]) - T(1));
            return;
        case ActivationKind::Softsign:
            for (int64_t k = 0; k < n; ++k) x[k] = x[k] / (T(1) + std::abs(x[k]));
            return;
        case ActivationKind::Softplus:
            for (int64_t k = 0; k < n; ++k) x[k] = softplus(x[k]);
            return;
    }
}

// ---- Cells -----------------------------------------------------------------------------------------------------

enum class Cell { Rnn, Gru, Lstm };

constexpr int64_t gate_count(Cell cell) { return cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4; }

// f for RNN; f (gates), g (candidate) for GRU; f (gates), g (cell input), h (cell output) for LSTM.
constexpr size_t activations_per_direction(Cell cell) { return cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 2 : 3; }

const char* cell_name(Cell cell) { return cell == Cell::Rnn ? "RNN" : cell == Cell::Gru ? "GRU" : "LSTM"; }

// Input indices.  X, W, R, B, sequence_lens, initial_h are common; LSTM adds initial_c and P.
enum Input : size_t { kX = 0, kW, kR, kB, kSequenceLens, kInitialH, kInitialC, kPeepholes };

// Sizes of one run.
struct Dims {
    int64_t steps = 0, batch = 0, input = 0, hidden = 0, directions = 1, gates = 1;
    int64_t gate_width() const { return gates * hidden; }
};

// The run's float inputs as T pointers (nullptr when absent) and outputs (nullptr when not wanted).
template <typename T> struct Buffers {
    const T* x = nullptr;
    const T* w = nullptr;
    const T* r = nullptr;
    const T* b = nullptr;
    const T* initial_h = nullptr;
    const T* initial_c = nullptr;
    const T* peepholes = nullptr;
    T* y = nullptr;
    T* y_h = nullptr;
    T* y_c = nullptr;
};

// Buffers from input(index) -> const T* and output(index) -> T* lookups.
template <typename T, typename Inputs, typename Outputs>
Buffers<T> make_buffers(const Inputs& input, const Outputs& output) {
    Buffers<T> b;
    b.x = input(kX);
    b.w = input(kW);
    b.r = input(kR);
    b.b = input(kB);
    b.initial_h = input(kInitialH);
    b.initial_c = input(kInitialC);
    b.peepholes = input(kPeepholes);
    b.y = output(0);
    b.y_h = output(1);
    b.y_c = output(2);
    return b;
}

int64_t max_steps(const std::vector<int64_t>& lengths) {
    return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

// Rows of R transposed into column panels (the right-hand operand layout of util/gemm.h's packed products):
// column j of R'^T (row j of R') holds its `depth` weights in panel j / w, w = packed_gemm_panel_width(), which is
// 32 on AVX-512 and 16 on AVX2 machines and so also selects the few_rows kernel variant.
class RecurrentPanels {
public:
    // r: [columns, depth] row-major (columns = the rows of R taken).
    RecurrentPanels(const float* r, int64_t columns, int64_t depth)
        : columns_(columns), depth_(depth), width_(packed_gemm_panel_width()) {
        data_.assign(static_cast<size_t>(panels() * depth * width_), 0.0f);
        for (int64_t j = 0; j < columns; ++j) {
            float* dst = data_.data() + (j / width_) * depth * width_ + j % width_;
            for (int64_t k = 0; k < depth; ++k) dst[k * width_] = r[j * depth + k];
        }
    }

    int64_t columns() const { return columns_; }
    int64_t width() const { return width_; }
    int64_t panels() const { return (columns_ + width_ - 1) / width_; }
    const float* panel(int64_t p) const { return data_.data() + p * depth_ * width_; }

private:
    int64_t columns_, depth_, width_;
    std::vector<float> data_;
};

// The most state rows one few_rows call takes for panels of this width.
int64_t few_rows_limit(int64_t panel_width) { return panel_width == 32 ? 8 : 4; }

#if TESSERA_CPU_X86  // the few_rows kernels, for util/gemm.h's panel widths (x86 only)
// acc[r] += state[r * stride] * panel row b (32 columns).
template <int kRows>
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline void few_rows_step_avx512(__m512 (&acc)[kRows][2],
                                                                                          const float* b,
                                                                                          const float* state,
                                                                                          int64_t stride) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    for (int r = 0; r < kRows; ++r) {
        const __m512 a = _mm512_set1_ps(state[r * stride]);
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
}

// Products of a few state rows with one panel of R'^T, out[r, j] = sum_k state[r, k] * R'[j, k] for r < kRows: the
// panel is read once for all the rows, the accumulators stay in registers.  One variant per panel width of
// util/gemm.h: 32 columns (AVX-512, up to 8 rows: 16 accumulators) and 16 (AVX2, up to 4 rows: 8 of the 16
// registers).  The state is read in place, so a step's product needs no packing and no allocation.
template <int kRows>
__attribute__((target("avx512f"))) void few_rows_avx512(const float* panel, int64_t depth, const float* state,
                                                         int64_t state_stride, float* out, int64_t ldo, int64_t cols) {
    // Few rows leave too few independent sums to hide the FMA latency: split k over several chains.
    constexpr int kChains = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
    __m512 acc[kChains][kRows][2];
    for (auto& chain : acc) {
        for (auto& row : chain) row[0] = row[1] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + kChains <= depth; k += kChains) {
#pragma GCC unroll 4
        for (int chain = 0; chain < kChains; ++chain) {
            few_rows_step_avx512<kRows>(acc[chain], panel + (k + chain) * 32, state + k + chain, state_stride);
        }
    }
    for (; k < depth; ++k) few_rows_step_avx512<kRows>(acc[0], panel + k * 32, state + k, state_stride);
    const __mmask16 mask0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
    const __mmask16 mask1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : 0;
    for (int r = 0; r < kRows; ++r) {
        for (int chain = 1; chain < kChains; ++chain) {
            acc[0][r][0] = _mm512_add_ps(acc[0][r][0], acc[chain][r][0]);
            acc[0][r][1] = _mm512_add_ps(acc[0][r][1], acc[chain][r][1]);
        }
        _mm512_mask_storeu_ps(out + r * ldo, mask0, acc[0][r][0]);
        _mm512_mask_storeu_ps(out + r * ldo + 16, mask1, acc[0][r][1]);
    }
}

// acc[r] += state[r * stride] * panel row b (16 columns).
template <int kRows>
[[gnu::always_inline]] __attribute__((target("avx2,fma"))) inline void few_rows_step_avx2(__m256 (&acc)[kRows][2],
                                                                                         const float* b,
                                                                                         const float* state,
                                                                                         int64_t stride) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    for (int r = 0; r < kRows; ++r) {
        const __m256 a = _mm256_broadcast_ss(state + r * stride);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
}

template <int kRows>
__attribute__((target("avx2,fma"))) void few_rows_avx2(const float* panel, int64_t depth, const float* state,
                                                        int64_t state_stride, float* out, int64_t ldo, int64_t cols) {
    constexpr int kChains = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
    __m256 acc[kChains][kRows][2];
    for (auto& chain : acc) {
        for (auto& row : chain) row[0] = row[1] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + kChains <= depth; k += kChains) {
#pragma GCC unroll 4
        for (int chain = 0; chain < kChains; ++chain) {
            few_rows_step_avx2<kRows>(acc[chain], panel + (k + chain) * 16, state + k + chain, state_stride);
        }
    }
    for (; k < depth; ++k) few_rows_step_avx2<kRows>(acc[0], panel + k * 16, state + k, state_stride);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(cols)), lane);
    const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(cols) - 8), lane);
    for (int r = 0; r < kRows; ++r) {
        for (int chain = 1; chain < kChains; ++chain) {
            acc[0][r][0] = _mm256_add_ps(acc[0][r][0], acc[chain][r][0]);
            acc[0][r][1] = _mm256_add_ps(acc[0][r][1], acc[chain][r][1]);
        }
        _mm256_maskstore_ps(out + r * ldo, mask0, acc[0][r][0]);
        _mm256_maskstore_ps(out + r * ldo + 8, mask1, acc[0][r][1]);
    }
}

// Rows [0, rows) (rows <= few_rows_limit) of the state times panel p, written to out's columns of that panel.
void few_rows_product(const RecurrentPanels& panels, int64_t p, const float* state, int64_t rows, int64_t depth,
                      float* out, int64_t ldo) {
    using RowsKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t);
    static constexpr RowsKernel kAvx512[] = {few_rows_avx512<1>, few_rows_avx512<2>, few_rows_avx512<3>,
                                             few_rows_avx512<4>, few_rows_avx512<5>, few_rows_avx512<6>,
                                             few_rows_avx512<7>, few_rows_avx512<8>};
    static constexpr RowsKernel kAvx2[] = {few_rows_avx2<1>, few_rows_avx2<2>, few_rows_avx2<3>, few_rows_avx2<4>};
    const int64_t j0 = p * panels.width();
    const RowsKernel kernel = (panels.width() == 32 ? kAvx512 : kAvx2)[rows - 1];
    kernel(panels.panel(p), depth, state, depth, out + j0, ldo, std::min(panels.width(), panels.columns() - j0));
}
#else  // never called: panels are built only where packed_gemm_supported()
void few_rows_product(const RecurrentPanels&, int64_t, const float*, int64_t, int64_t, float*, int64_t) {
    x86_kernel_unavailable(__func__);
}
#endif

// Where a direction's work runs: across the pool, or (pool == nullptr) entirely on the calling thread, for
// directions that run side by side inside a parallel region.
struct Execution {
    ThreadPool* pool = nullptr;

    // fn(begin, end) over [0, n) in chunks of at least `grain`.
    template <typename Fn> void for_range(int64_t n, int64_t grain, const Fn& fn) const {
        if (pool) pool->parallel_for(n, grain, fn);
        else if (n > 0) fn(0, n);
    }

    // Row-major C[M, N] = A[M, K] x B[N, K]^T.  The dimensions were checked with check_gemm_dimensions.
    template <typename T>
    void gemm_abt(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
                  int64_t ldc) const {
        if (pool) gemm<T>(*pool, false, true, M, N, K, T(1), A, lda, B, ldb, T(0), C, ldc);
        else gemm_serial<T>(false, true, M, N, K, T(1), A, lda, B, ldb, T(0), C, ldc);
    }
};

// The recurrent product of one step, out[n, 0:columns) (row stride ldo) = state[n, :] x R'^T for every batch row
// n, where R' is `columns` rows of R.  With panelized weights (float) nothing is packed per step: each task takes
// column panels of R'^T and runs the whole batch through each (few_rows_product), so the panel stays in cache.
// Otherwise a BLAS product, which repacks R at every call.
template <typename T>
void recurrent_product(const Execution& exec, const RecurrentPanels* panels, const T* state, const T* r,
                       int64_t batch, int64_t hidden, int64_t columns, T* out, int64_t ldo) {
    if constexpr (std::is_same_v<T, float>) {
        if (panels) {
            const int64_t rows_per_call = few_rows_limit(panels->width());
            // Tasks of at least ~1M multiply-adds: waking a worker costs more than smaller ones save.
            constexpr int64_t kProductGrain = int64_t{1} << 20;
            const int64_t panel_work = std::max<int64_t>(1, batch * hidden * panels->width());
            exec.for_range(panels->panels(), std::max<int64_t>(1, kProductGrain / panel_work),
                           [&](int64_t begin, int64_t end) {
                               for (int64_t p = begin; p < end; ++p) {
                                   for (int64_t r0 = 0; r0 < batch; r0 += rows_per_call) {
                                       few_rows_product(*panels, p, state + r0 * hidden,
                                                        std::min(rows_per_call, batch - r0), hidden,
                                                        out + r0 * ldo, ldo);
                                   }
                               }
                           });
            return;
        }
    }
    exec.gemm_abt<T>(batch, columns, hidden, state, hidden, r, hidden, out, ldo);
}

class RecurrentKernel final : public Kernel {
public:
    RecurrentKernel(const NodeInfo& info, Cell cell, bool has_layout)
        : cell_(cell),
          op_(cell_name(cell)),
          hidden_size_(info.attr_int("hidden_size", -1)),
          batch_major_(has_layout && info.attr_int("layout", 0) != 0),
          linear_before_reset_(cell == Cell::Gru && info.attr_int("linear_before_reset", 0) != 0),
          input_forget_(cell == Cell::Lstm && info.attr_int("input_forget", 0) != 0) {
        const std::string direction = info.attr_string("direction", "forward");
        if (direction == "forward") {
            directions_ = 1;
        } else if (direction == "reverse") {
            directions_ = 1;
            reverse_only_ = true;
        } else if (direction == "bidirectional") {
            directions_ = 2;
        } else {
            throw KernelError(op_ + ": unknown direction '" + direction + "'");
        }
        if (info.has_attr("clip")) {
            clip_ = info.attr_float("clip", 0.0f);
            if (!(clip_ > 0.0f)) throw KernelError(op_ + ": clip must be positive");
        }
        if (info.has_attr("hidden_size") && hidden_size_ < 1) throw KernelError(op_ + ": hidden_size must be positive");

        const size_t per_direction = activations_per_direction(cell);
        std::vector<std::string> names = info.has_attr("activations") ? info.attr_strings("activations")
                                                                        : std::vector<std::string>{};
        if (names.empty()) {
            const std::vector<std::string> defaults =
                cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                    : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
            for (int d = 0; d < directions_; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
        }
        pack_constant_recurrence(info);
        activations_ = parse_activations(op_, names, info.attr_floats("activation_alpha"),
                                         info.attr_floats("activation_beta"));
        if (activations_.size() == per_direction && directions_ == 2) {
            // One set for both directions.
            activations_.insert(activations_.end(), activations_.begin(), activations_.end());
        }
        if (activations_.size() != per_direction * size_t(directions_)) {
            throw KernelError(op_ + ": expected " + std::to_string(per_direction * size_t(directions_)) +
                              " activations, got " + std::to_string(activations_.size()));
        }
    }

    void compute(KernelContext& ctx) const override {
        const Dims dims = validate(ctx);
        const std::vector<int64_t> lengths = sequence_lengths(ctx, dims);

        const Shape y_shape = batch_major_ ? Shape{dims.batch, dims.steps, dims.directions, dims.hidden}
                                           : Shape{dims.steps, dims.directions, dims.batch, dims.hidden};
        const Shape state_shape = batch_major_ ? Shape{dims.batch, dims.directions, dims.hidden}
                                               : Shape{dims.directions, dims.batch, dims.hidden};
        const int32_t type = ctx.input(kX).type;
        auto wanted = [&](size_t i) { return i < ctx.output_count() && ctx.output_wanted(i); };
        Tensor* outputs[3] = {nullptr, nullptr, nullptr};
        for (size_t i = 0; i < (cell_ == Cell::Lstm ? 3u : 2u); ++i) {
            if (wanted(i)) outputs[i] = &ctx.output(i, type, i == 0 ? y_shape : state_shape);
        }
        // initial_c and P exist for LSTM only.
        auto input = [&](size_t i) -> const Tensor* {
            return ctx.has_input(i) && (i <= kInitialH || cell_ == Cell::Lstm) ? &ctx.input(i) : nullptr;
        };

        if (is_16bit_float(type)) {
            std::optional<WidenedTensor> widened[kPeepholes + 1];
            for (size_t i : {kX, kW, kR, kB, kInitialH, kInitialC, kPeepholes}) {
                if (const Tensor* t = input(i)) widened[i].emplace(*t);
            }
            std::optional<NarrowedOutput> narrowed[3];
            for (size_t i = 0; i < 3; ++i) {
                if (outputs[i]) narrowed[i].emplace(*outputs[i]);
            }
            run<float>(ctx.pool(), dims, lengths,
                       make_buffers<float>(
                           [&](size_t i) { return widened[i] ? widened[i]->tensor().ptr<float>() : nullptr; },
                           [&](size_t i) { return narrowed[i] ? narrowed[i]->tensor().ptr<float>() : nullptr; }));
            for (auto& n : narrowed) {
                if (n) n->finish();
            }
            return;
        }
        dispatch_list(FloatTypes{}, type, [&]<typename T>() {
            run<T>(ctx.pool(), dims, lengths,
                   make_buffers<T>([&](size_t i) { return input(i) ? input(i)->template ptr<T>() : nullptr; },
                                   [&](size_t i) { return outputs[i] ? outputs[i]->template ptr<T>() : nullptr; }));
        });
    }

private:
    // Checks every input shape against X, W and R; returns the run's sizes.
    Dims validate(const KernelContext& ctx) const {
        const Tensor& x = ctx.input(kX);
        const Tensor& w = ctx.input(kW);
        const Tensor& r = ctx.input(kR);
        auto fail = [&](const std::string& what) { throw KernelError(op_ + ": " + what); };
        if (x.rank() != 3) fail("X must have rank 3, got shape " + shape_string(x.shape));
        if (w.rank() != 3) fail("W must have rank 3, got shape " + shape_string(w.shape));
        if (r.rank() != 3) fail("R must have rank 3, got shape " + shape_string(r.shape));
        Dims d;
        d.steps = batch_major_ ? x.shape[1] : x.shape[0];
        d.batch = batch_major_ ? x.shape[0] : x.shape[1];
        d.input = x.shape[2];
        d.directions = directions_;
        d.gates = gate_count(cell_);
        d.hidden = hidden_size_ > 0 ? hidden_size_ : r.shape[2];
        const int64_t gh = d.gate_width();
        for (const Tensor* t : {&x, &w, &r}) {
            if (t->type != x.type) fail("X, W and R must have the same element type");
        }
        if (w.shape != Shape{d.directions, gh, d.input}) {
            fail("W must have shape " + shape_string({d.directions, gh, d.input}) + ", got " + shape_string(w.shape));
        }
        if (r.shape != Shape{d.directions, gh, d.hidden}) {
            fail("R must have shape " + shape_string({d.directions, gh, d.hidden}) + ", got " +
                 shape_string(r.shape));
        }
        auto check = [&](size_t index, const char* name, const Shape& expected) {
            if (!ctx.has_input(index)) return;
            const Tensor& t = ctx.input(index);
            if (t.type != x.type) fail(std::string(name) + " must have the element type of X");
            if (t.shape != expected) {
                fail(std::string(name) + " must have shape " + shape_string(expected) + ", got " +
                     shape_string(t.shape));
            }
        };
        const Shape state =
            batch_major_ ? Shape{d.batch, d.directions, d.hidden} : Shape{d.directions, d.batch, d.hidden};
        check(kB, "B", {d.directions, 2 * gh});
        check(kInitialH, "initial_h", state);
        if (cell_ == Cell::Lstm) {
            check(kInitialC, "initial_c", state);
            check(kPeepholes, "P", {d.directions, 3 * d.hidden});
        }
        return d;
    }

    // Per batch row, the number of steps it runs (all of them without sequence_lens).
    std::vector<int64_t> sequence_lengths(const KernelContext& ctx, const Dims& dims) const {
        if (!ctx.has_input(kSequenceLens)) return std::vector<int64_t>(static_cast<size_t>(dims.batch), dims.steps);
        const Tensor& lens = ctx.input(kSequenceLens);
        if (lens.shape != Shape{dims.batch}) {
            throw KernelError(op_ + ": sequence_lens must have shape [" + std::to_string(dims.batch) + "], got " +
                              shape_string(lens.shape));
        }
        std::vector<int64_t> lengths = movement::read_integers(lens, op_ + " sequence_lens");
        for (int64_t l : lengths) {
            if (l < 0 || l > dims.steps) {
                throw KernelError(op_ + ": sequence_lens value " + std::to_string(l) + " is outside [0, " +
                                  std::to_string(dims.steps) + "]");
            }
        }
        return lengths;
    }

    template <typename T>
    void run(ThreadPool& pool, const Dims& dims, const std::vector<int64_t>& lengths, const Buffers<T>& io) const {
        const int64_t steps = dims.steps, batch = dims.batch, hidden = dims.hidden, gh = dims.gate_width();
        const int64_t max_length = max_steps(lengths);

        // Panelized recurrent weights: the constant ones, or panelized now when several steps share them.
        const std::vector<RecurrentPanels>* panels = nullptr;
        std::vector<RecurrentPanels> panels_now;
        if constexpr (std::is_same_v<T, float>) {
            if (packed_gemm_supported()) {
                if (!packed_recurrence_.empty()) {
                    panels = &packed_recurrence_;
                } else if (max_length > 1) {
                    panels_now = pack_recurrence(io.r, dims.directions, hidden);
                    panels = &panels_now;
                }
            }
        }
        if (io.y && lengths != std::vector<int64_t>(lengths.size(), steps)) {
            // Steps past a row's length emit zeros.
            std::fill_n(io.y, steps * dims.directions * batch * hidden, T(0));
        }

        // The input projections are computed for blocks of steps at a time (one GEMM per block, with the X rows
        // the block's steps read gathered first), so that they are still in cache when their steps use them.
        const int64_t block_rows = std::max<int64_t>(kProjectionRows, kProjectionBytes / int64_t(sizeof(T) * gh));
        const int64_t block_steps = std::clamp<int64_t>(block_rows / std::max<int64_t>(1, batch), 1,
                                                        std::max<int64_t>(1, max_length));
        check_gemm_dimensions(block_steps * batch, gh, dims.input);
        check_gemm_dimensions(batch, gh, hidden);
        std::vector<DirectionState<T>> states;
        for (int64_t d = 0; d < dims.directions; ++d) states.emplace_back(dims, block_steps);

        // Two directions run side by side, one thread each, with no synchronization per step, when that uses
        // the whole pool or when the steps are too small to gain from splitting (waking workers costs more).
        const bool side_by_side = dims.directions == 2 && pool.size() > 1 &&
                                  (pool.size() == 2 || batch * gh * hidden < kSplitStepWork);
        if (side_by_side) {
            pool.parallel_for(2, 1, [&](int64_t begin, int64_t end) {
                for (int64_t d = begin; d < end; ++d) {
                    run_direction(Execution{nullptr}, dims, lengths, io, panels, d, block_steps, states[size_t(d)]);
                }
            });
        } else {
            for (int64_t d = 0; d < dims.directions; ++d) {
                run_direction(Execution{&pool}, dims, lengths, io, panels, d, block_steps, states[size_t(d)]);
            }
        }
    }

    // One direction's working memory, allocated before any parallel region.
    template <typename T> struct DirectionState {
        DirectionState(const Dims& dims, int64_t block_steps)
            : block_x(new T[static_cast<size_t>(block_steps * dims.batch * dims.input)]),
              projections(new T[static_cast<size_t>(block_steps * dims.batch * dims.gate_width())]),
              h(static_cast<size_t>(dims.batch * dims.hidden)),
              c(static_cast<size_t>(dims.batch * dims.hidden)),
              gates(static_cast<size_t>(dims.batch * dims.gate_width())),
              reset_hidden(static_cast<size_t>(dims.batch * dims.hidden)),
              bias(static_cast<size_t>(dims.gate_width())),
              candidate_recurrent_bias(static_cast<size_t>(dims.hidden)) {}

        std::unique_ptr<T[]> block_x;      // the X rows of a block of steps (uninitialized: written before use)
        std::unique_ptr<T[]> projections;  // their input projections
        std::vector<T> h, c;
        std::vector<T> gates;                     // per row: recurrent products, then gate values
        std::vector<T> reset_hidden;              // GRU: r (.) H_prev
        std::vector<T> bias;                      // see prepare_bias
        std::vector<T> candidate_recurrent_bias;  // GRU linear_before_reset: Rbh
    };

    // Runs every step of direction d.  Never throws (it may run inside a parallel region).
    template <typename T>
    void run_direction(const Execution& exec, const Dims& dims, const std::vector<int64_t>& lengths,
                       const Buffers<T>& io, const std::vector<RecurrentPanels>* panels, int64_t d,
                       int64_t block_steps, DirectionState<T>& st) const {
        const int64_t steps = dims.steps, batch = dims.batch, input = dims.input, hidden = dims.hidden;
        const int64_t gh = dims.gate_width();
        const int64_t max_length = max_steps(lengths);
        const bool reverse = reverse_only_ || d == 1;
        const T* w = io.w + d * gh * input;
        const T* r = io.r + d * gh * hidden;
        const T* peepholes = io.peepholes ? io.peepholes + d * 3 * hidden : nullptr;
        const Activation* f = activations_.data() + size_t(d) * activations_per_direction(cell_);
        prepare_bias(io.b ? io.b + d * 2 * gh : nullptr, hidden, st.bias, st.candidate_recurrent_bias);
        load_state(io.initial_h, d, dims, st.h);
        load_state(io.initial_c, d, dims, st.c);
        auto product = [&](size_t panel_index, const T* state, const T* r_rows, int64_t columns, T* out) {
            recurrent_product<T>(exec, panels ? &(*panels)[panel_index] : nullptr, state, r_rows, batch, hidden,
                                 columns, out, gh);
        };
        // Row n runs step s at time t = s (forward) or length - 1 - s (reverse) while s < its length.
        auto time_of = [&](int64_t n, int64_t s) { return reverse ? lengths[size_t(n)] - 1 - s : s; };
        const int64_t grain = std::max<int64_t>(1, kGrainElements / gh);
        T* h = st.h.data();
        T* gates = st.gates.data();

        for (int64_t block = 0; block < max_length; block += block_steps) {
            const int64_t block_end = std::min(max_length, block + block_steps);
            for (int64_t s = block; s < block_end; ++s) {
                for (int64_t n = 0; n < batch; ++n) {
                    T* dst = st.block_x.get() + ((s - block) * batch + n) * input;
                    if (s >= lengths[size_t(n)]) {
                        std::fill_n(dst, input, T(0));  // a finished row: its product goes unused
                        continue;
                    }
                    const int64_t t = time_of(n, s);
                    std::copy_n(io.x + (batch_major_ ? n * steps + t : t * batch + n) * input, input, dst);
                }
            }
            exec.gemm_abt<T>((block_end - block) * batch, gh, input, st.block_x.get(), input, w, input,
                             st.projections.get(), gh);

            for (int64_t s = block; s < block_end; ++s) {
                auto projection_row = [&](int64_t n) { return st.projections.get() + ((s - block) * batch + n) * gh; };
                auto output_row = [&](int64_t n) -> T* {
                    if (!io.y) return nullptr;
                    const int64_t t = time_of(n, s);
                    const int64_t row = batch_major_ ? (n * steps + t) * dims.directions + d
                                                     : (t * dims.directions + d) * batch + n;
                    return io.y + row * hidden;
                };
                if (cell_ == Cell::Gru && !linear_before_reset_) {
                    // r gates the previous state before its product with Rh: two products per step.
                    product(size_t(2 * d), h, r, 2 * hidden, gates);
                    exec.for_range(batch, grain, [&](int64_t begin, int64_t end) {
                        for (int64_t n = begin; n < end; ++n) {
                            if (s >= lengths[size_t(n)]) continue;
                            gru_update_and_reset_gates(projection_row(n), gates + n * gh, st.bias.data(),
                                                       h + n * hidden, st.reset_hidden.data() + n * hidden, hidden,
                                                       f[0]);
                        }
                    });
                    product(size_t(2 * d + 1), st.reset_hidden.data(), r + 2 * hidden * hidden, hidden,
                            gates + 2 * hidden);
                } else {
                    product(size_t(d), h, r, gh, gates);
                }
                exec.for_range(batch, grain, [&](int64_t begin, int64_t end) {
                    for (int64_t n = begin; n < end; ++n) {
                        if (s >= lengths[size_t(n)]) continue;
                        T* hn = h + n * hidden;
                        T* gn = gates + n * gh;
                        switch (cell_) {
                            case Cell::Rnn: rnn_step(projection_row(n), gn, st.bias.data(), hn, hidden, f[0]); break;
                            case Cell::Gru:
                                gru_step(projection_row(n), gn, st.bias.data(), st.candidate_recurrent_bias.data(),
                                         hn, hidden, f);
                                break;
                            case Cell::Lstm:
                                lstm_step(projection_row(n), gn, st.bias.data(), peepholes, hn,
                                          st.c.data() + n * hidden, hidden, f);
                                break;
                        }
                        if (T* y = output_row(n)) std::copy_n(hn, hidden, y);
                    }
                });
            }
        }
        store_state(st.h, lengths, d, dims, io.y_h);
        store_state(st.c, lengths, d, dims, io.y_c);
    }

    // The per-gate bias added to each step's sums: Wb + Rb, except that GRU with linear_before_reset keeps Rbh
    // apart (it is added before the product with r).
    template <typename T>
    void prepare_bias(const T* b, int64_t hidden, std::vector<T>& bias, std::vector<T>& candidate_recurrent) const {
        const int64_t gh = int64_t(bias.size());
        if (!b) {
            std::fill(bias.begin(), bias.end(), T(0));
            std::fill(candidate_recurrent.begin(), candidate_recurrent.end(), T(0));
            return;
        }
        for (int64_t k = 0; k < gh; ++k) bias[size_t(k)] = b[k] + b[gh + k];
        if (linear_before_reset_) {
            for (int64_t k = 0; k < hidden; ++k) {
                bias[size_t(2 * hidden + k)] = b[2 * hidden + k];
                candidate_recurrent[size_t(k)] = b[gh + 2 * hidden + k];
            }
        }
    }

    // Direction d's slice of initial_h / initial_c (zeros when absent).
    template <typename T> void load_state(const T* initial, int64_t d, const Dims& dims, std::vector<T>& state) const {
        if (!initial) {
            std::fill(state.begin(), state.end(), T(0));
            return;
        }
        for (int64_t n = 0; n < dims.batch; ++n) {
            std::copy_n(initial + state_offset(d, n, dims), dims.hidden, state.data() + n * dims.hidden);
        }
    }

    // Writes direction d's final state into Y_h / Y_c.  Rows with a zero sequence length get zeros, as in ONNX
    // Runtime.
    template <typename T>
    void store_state(const std::vector<T>& state, const std::vector<int64_t>& lengths, int64_t d, const Dims& dims,
                     T* out) const {
        if (!out) return;
        for (int64_t n = 0; n < dims.batch; ++n) {
            T* dst = out + state_offset(d, n, dims);
            if (lengths[size_t(n)] == 0) std::fill_n(dst, dims.hidden, T(0));
            else std::copy_n(state.data() + n * dims.hidden, dims.hidden, dst);
        }
    }

    int64_t state_offset(int64_t d, int64_t n, const Dims& dims) const {
        return (batch_major_ ? n * dims.directions + d : d * dims.batch + n) * dims.hidden;
    }

    template <typename T> T clip(T v) const {
        const T limit = T(clip_);
        return std::min(std::max(v, -limit), limit);
    }

    // Ht = f(x + Ht-1 R^T + Wb + Rb); `recurrent` holds Ht-1 R^T and is used as scratch.
    template <typename T>
    void rnn_step(const T* x, T* recurrent, const T* bias, T* h, int64_t hidden, const Activation& f) const {
        for (int64_t k = 0; k < hidden; ++k) recurrent[k] = clip(x[k] + recurrent[k] + bias[k]);
        activate(f, recurrent, hidden);
        std::copy_n(recurrent, hidden, h);
    }

    // GRU without linear_before_reset, first half: z and r from x and Ht-1 R[zr]^T; writes r (.) Ht-1 for the
    // candidate's product with Rh.
    template <typename T>
    void gru_update_and_reset_gates(const T* x, T* gates, const T* bias, const T* h, T* reset_hidden, int64_t hidden,
                                    const Activation& f) const {
        for (int64_t k = 0; k < 2 * hidden; ++k) gates[k] = clip(x[k] + gates[k] + bias[k]);
        activate(f, gates, 2 * hidden);
        const T* reset = gates + hidden;
        for (int64_t k = 0; k < hidden; ++k) reset_hidden[k] = reset[k] * h[k];
    }

    // GRU, gates z, r, h: Ht = (1 - z) (.) g(candidate) + z (.) Ht-1, where the candidate is
    //   x_h + (r (.) Ht-1) Rh^T + Rbh + Wbh          (linear_before_reset = 0; z and r are already in `gates`)
    //   x_h + r (.) (Ht-1 Rh^T + Rbh) + Wbh          (linear_before_reset = 1)
    template <typename T>
    void gru_step(const T* x, T* gates, const T* bias, const T* candidate_recurrent_bias, T* h, int64_t hidden,
                  const Activation* f) const {
        T* update = gates;
        T* reset = gates + hidden;
        T* candidate = gates + 2 * hidden;
        if (linear_before_reset_) {
            for (int64_t k = 0; k < 2 * hidden; ++k) gates[k] = clip(x[k] + gates[k] + bias[k]);
            activate(f[0], gates, 2 * hidden);
            for (int64_t k = 0; k < hidden; ++k) {
                const int64_t j = 2 * hidden + k;
                candidate[k] = clip(x[j] + reset[k] * (candidate[k] + candidate_recurrent_bias[k]) + bias[j]);
            }
        } else {
            for (int64_t k = 0; k < hidden; ++k) {
                const int64_t j = 2 * hidden + k;
                candidate[k] = clip(x[j] + candidate[k] + bias[j]);
            }
        }
        activate(f[1], candidate, hidden);
        for (int64_t k = 0; k < hidden; ++k) h[k] = (T(1) - update[k]) * candidate[k] + update[k] * h[k];
    }

    // LSTM, gates i, o, f, c (in W's order), peepholes P[iof]:
    //   i = f(x_i + Ht-1 Ri^T + Pi (.) Ct-1 + b_i)     f = f(... + Pf (.) Ct-1 ...)  (1 - i with input_forget)
    //   c = g(x_c + Ht-1 Rc^T + b_c)                   Ct = f (.) Ct-1 + i (.) c
    //   o = f(x_o + Ht-1 Ro^T + Po (.) Ct + b_o)       Ht = o (.) h(Ct)
    // Clipping applies to the gate inputs, not to Ct.
    template <typename T>
    void lstm_step(const T* x, T* gates, const T* bias, const T* peepholes, T* h, T* c, int64_t hidden,
                   const Activation* f) const {
        T* in = gates;
        T* out = gates + hidden;
        T* forget = gates + 2 * hidden;
        T* cell = gates + 3 * hidden;
        for (int64_t k = 0; k < 4 * hidden; ++k) gates[k] = x[k] + gates[k] + bias[k];
        if (peepholes) {
            for (int64_t k = 0; k < hidden; ++k) {
                in[k] += peepholes[k] * c[k];
                forget[k] += peepholes[2 * hidden + k] * c[k];
            }
        }
        for (int64_t k = 0; k < hidden; ++k) {
            in[k] = clip(in[k]);
            forget[k] = clip(forget[k]);
            cell[k] = clip(cell[k]);
        }
        activate(f[0], in, hidden);
        if (input_forget_) {
            for (int64_t k = 0; k < hidden; ++k) forget[k] = T(1) - in[k];
        } else {
            activate(f[0], forget, hidden);
        }
        activate(f[1], cell, hidden);
        for (int64_t k = 0; k < hidden; ++k) c[k] = forget[k] * c[k] + in[k] * cell[k];
        for (int64_t k = 0; k < hidden; ++k) {
            out[k] = clip(out[k] + (peepholes ? peepholes[hidden + k] * c[k] : T(0)));
        }
        activate(f[0], out, hidden);
        std::copy_n(c, hidden, cell);  // the cell gate is spent: reuse it for h(Ct)
        activate(f[2], cell, hidden);
        for (int64_t k = 0; k < hidden; ++k) h[k] = out[k] * cell[k];
    }

    // Float recurrent weights panelized for recurrent_product.  Per direction: the rows multiplied by Ht-1 (for
    // GRU without linear_before_reset, R[zr] and then R[h], which multiplies r (.) Ht-1).
    std::vector<RecurrentPanels> pack_recurrence(const float* r, int64_t directions, int64_t hidden) const {
        const int64_t gh = gate_count(cell_) * hidden;
        std::vector<RecurrentPanels> packed;
        for (int64_t d = 0; d < directions; ++d) {
            const float* rd = r + d * gh * hidden;
            if (cell_ == Cell::Gru && !linear_before_reset_) {
                packed.emplace_back(rd, 2 * hidden, hidden);
                packed.emplace_back(rd + 2 * hidden * hidden, hidden, hidden);
            } else {
                packed.emplace_back(rd, gh, hidden);
            }
        }
        return packed;
    }

    // Packs a constant R once, at session creation.
    void pack_constant_recurrence(const NodeInfo& info) {
        if (!packed_gemm_supported()) return;
        const std::optional<Tensor> r = info.constant_tensor(kR);
        if (!r || r->rank() != 3 || r->shape[0] != directions_ || r->shape[1] != gate_count(cell_) * r->shape[2] ||
            (hidden_size_ > 0 && r->shape[2] != hidden_size_)) {
            return;  // not constant, or malformed (compute() reports it)
        }
        if (r->type == TESS_ELEMENT_FLOAT32) {
            packed_recurrence_ = pack_recurrence(r->ptr<float>(), r->shape[0], r->shape[2]);
        } else if (is_16bit_float(r->type)) {
            const WidenedTensor wide(*r);
            packed_recurrence_ = pack_recurrence(wide.tensor().ptr<float>(), r->shape[0], r->shape[2]);
        }
    }

    // Input projections per block: at least this many rows, or this many bytes.
    static constexpr int64_t kProjectionRows = 256;
    static constexpr int64_t kProjectionBytes = int64_t{4} << 20;
    static constexpr int64_t kGrainElements = 32768;  // gate values per parallel task
    // Multiply-adds of one step's recurrent product below which two directions run side by side.
    static constexpr int64_t kSplitStepWork = int64_t{4} << 20;

    Cell cell_;
    std::string op_;
    int64_t hidden_size_;
    bool batch_major_;
    bool linear_before_reset_;
    bool input_forget_;
    int directions_ = 1;
    bool reverse_only_ = false;
    float clip_ = std::numeric_limits<float>::infinity();
    std::vector<Activation> activations_;  // activations_per_direction(cell) per direction
    std::vector<RecurrentPanels> packed_recurrence_;  // see pack_recurrence; empty when R is not a float constant
};

}  // namespace

void register_rnn_kernels(KernelRegistry& registry) {
    const auto floats = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<int32_t> lengths{TESS_ELEMENT_INT32, TESS_ELEMENT_INT64};
    for (Cell cell : {Cell::Rnn, Cell::Gru, Cell::Lstm}) {
        std::vector<std::pair<size_t, std::vector<int32_t>>> input_types{
            {kX, floats}, {kW, floats}, {kR, floats}, {kB, floats}, {kSequenceLens, lengths}, {kInitialH, floats}};
        if (cell == Cell::Lstm) {
            input_types.push_back({kInitialC, floats});
            input_types.push_back({kPeepholes, floats});
        }
        // Opset 14 adds `layout` (batch-major X, Y, Y_h, Y_c); 22 only adds bfloat16.
        for (const bool has_layout : {false, true}) {
            registry.add(KernelDef{.domain = "",
                                   .op_type = cell_name(cell),
                                   .since_version = has_layout ? 14 : 7,
                                   .end_version = has_layout ? 0 : 13,
                                   .input_types = input_types,
                                   .memory = KernelMemory::Normal,
                                   .factory = [cell, has_layout](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                       return std::make_unique<RecurrentKernel>(info, cell, has_layout);
                                   }});
        }
    }
}

}  // namespace tessera::cpu
