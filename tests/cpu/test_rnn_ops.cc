// RNN, GRU (linear_before_reset 0 and 1) and LSTM against a plain double-precision reference of the ONNX formulas
// with the default activations (f = sigmoid, g = h = tanh): every direction, with and without bias, initial states,
// peepholes and sequence_lens, seq-major and batch-major (layout 1), on random shapes including sizes of 1, odd
// sizes and hidden sizes that are not multiples of the kernels' panels.
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

enum class Cell { Rnn, Gru, Lstm };

struct RnnCase {
    Cell cell;
    int64_t steps, batch, input, hidden;
    std::string direction = "forward";
    bool bias = true, initial_h = false, initial_c = false, peepholes = false, lengths = false;
    bool linear_before_reset = false;
    bool batch_major = false;      // layout = 1
    bool constant_weights = false; // W and R initializers (R packed when the kernel is created)
};

int64_t gates_of(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 3 : 4; }
const char* name_of(Cell c) { return c == Cell::Rnn ? "RNN" : c == Cell::Gru ? "GRU" : "LSTM"; }
double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

struct RnnData {
    std::vector<float> x, w, r, b, h0, c0, p;
    std::vector<int32_t> lengths;
};

struct RnnResult {
    std::vector<double> y, y_h, y_c;  // seq-major: [steps, dirs, batch, hidden], [dirs, batch, hidden]
};

// The ONNX equations, one batch row and direction at a time.  x is seq-major [steps, batch, input].  Rows run their
// first `length` steps (reverse: from step length - 1 down to 0); Y is 0 past a row's length.
RnnResult reference_rnn(const RnnCase& c, const RnnData& d, int64_t dirs) {
    const int64_t H = c.hidden, I = c.input, G = gates_of(c.cell);
    RnnResult out;
    out.y.assign(size_t(c.steps * dirs * c.batch * H), 0.0);
    out.y_h.assign(size_t(dirs * c.batch * H), 0.0);
    out.y_c.assign(size_t(dirs * c.batch * H), 0.0);
    for (int64_t dir = 0; dir < dirs; ++dir) {
        const bool reverse = c.direction == "reverse" || dir == 1;
        auto W = [&](int64_t row, int64_t k) { return double(d.w[(dir * G * H + row) * I + k]); };
        auto R = [&](int64_t row, int64_t k) { return double(d.r[(dir * G * H + row) * H + k]); };
        auto Wb = [&](int64_t row) { return d.b.empty() ? 0.0 : double(d.b[dir * 2 * G * H + row]); };
        auto Rb = [&](int64_t row) { return d.b.empty() ? 0.0 : double(d.b[dir * 2 * G * H + G * H + row]); };
        for (int64_t n = 0; n < c.batch; ++n) {
            std::vector<double> h(size_t(H), 0.0), cs(size_t(H), 0.0);
            for (int64_t k = 0; k < H; ++k) {
                if (!d.h0.empty()) h[k] = d.h0[(dir * c.batch + n) * H + k];
                if (!d.c0.empty()) cs[k] = d.c0[(dir * c.batch + n) * H + k];
            }
            const int64_t length = d.lengths.empty() ? c.steps : d.lengths[n];
            for (int64_t s = 0; s < length; ++s) {
                const int64_t t = reverse ? length - 1 - s : s;
                const float* xt = &d.x[(t * c.batch + n) * I];
                // xw[row] = Xt W[row]^T + Wb[row];  hr[row] = Ht-1 R[row]^T + Rb[row].
                std::vector<double> xw(size_t(G * H)), hr(size_t(G * H));
                for (int64_t row = 0; row < G * H; ++row) {
                    double a = Wb(row), b = Rb(row);
                    for (int64_t k = 0; k < I; ++k) a += xt[k] * W(row, k);
                    for (int64_t k = 0; k < H; ++k) b += h[k] * R(row, k);
                    xw[row] = a;
                    hr[row] = b;
                }
                std::vector<double> next(static_cast<size_t>(H));
                if (c.cell == Cell::Rnn) {
                    for (int64_t k = 0; k < H; ++k) next[k] = std::tanh(xw[k] + hr[k]);
                } else if (c.cell == Cell::Gru) {  // gates z, r, h
                    std::vector<double> z(static_cast<size_t>(H)), r(static_cast<size_t>(H));
                    for (int64_t k = 0; k < H; ++k) {
                        z[k] = sigmoid(xw[k] + hr[k]);
                        r[k] = sigmoid(xw[H + k] + hr[H + k]);
                    }
                    for (int64_t k = 0; k < H; ++k) {
                        double recurrent;
                        if (c.linear_before_reset) {  // r (.) (Ht-1 Rh^T + Rbh)
                            recurrent = r[k] * hr[2 * H + k];
                        } else {  // (r (.) Ht-1) Rh^T + Rbh
                            recurrent = Rb(2 * H + k);
                            for (int64_t j = 0; j < H; ++j) recurrent += r[j] * h[j] * R(2 * H + k, j);
                        }
                        next[k] = (1 - z[k]) * std::tanh(xw[2 * H + k] + recurrent) + z[k] * h[k];
                    }
                }
                if (c.cell == Cell::Lstm) {  // gates i, o, f, c; peepholes i, o, f
                    auto P = [&](int64_t g, int64_t k) { return d.p.empty() ? 0.0 : double(d.p[(dir * 3 + g) * H + k]); };
                    for (int64_t k = 0; k < H; ++k) {
                        const double i = sigmoid(xw[k] + hr[k] + P(0, k) * cs[k]);
                        const double f = sigmoid(xw[2 * H + k] + hr[2 * H + k] + P(2, k) * cs[k]);
                        const double g = std::tanh(xw[3 * H + k] + hr[3 * H + k]);
                        cs[k] = f * cs[k] + i * g;
                        const double o = sigmoid(xw[H + k] + hr[H + k] + P(1, k) * cs[k]);
                        next[k] = o * std::tanh(cs[k]);
                    }
                }
                h = next;
                for (int64_t k = 0; k < H; ++k) out.y[((t * dirs + dir) * c.batch + n) * H + k] = h[k];
            }
            for (int64_t k = 0; k < H; ++k) {
                out.y_h[(dir * c.batch + n) * H + k] = h[k];
                out.y_c[(dir * c.batch + n) * H + k] = cs[k];
            }
        }
    }
    return out;
}

// Seq-major [steps, dirs, batch, H] or [dirs, batch, H] values into the batch-major layout (layout = 1).
std::vector<double> to_batch_major(const std::vector<double>& v, int64_t steps, int64_t dirs, int64_t batch,
                                   int64_t H) {
    std::vector<double> out(v.size());
    for (int64_t t = 0; t < steps; ++t)
        for (int64_t dir = 0; dir < dirs; ++dir)
            for (int64_t n = 0; n < batch; ++n)
                for (int64_t k = 0; k < H; ++k)
                    out[((n * steps + t) * dirs + dir) * H + k] = v[((t * dirs + dir) * batch + n) * H + k];
    return out;
}

void run_rnn_case(const RnnCase& c, uint32_t seed) {
    const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, G = gates_of(c.cell), H = c.hidden;
    std::mt19937 rng(seed);
    RnnData d;
    d.x = random_values<float>(c.steps * c.batch * c.input, seed + 1);
    // Weights around 1 / sqrt(fan-in) keep the gates away from saturation.
    const double ws = 1.5 / std::sqrt(double(c.input + H));
    d.w = random_values<float>(dirs * G * H * c.input, seed + 2, -ws, ws);
    d.r = random_values<float>(dirs * G * H * H, seed + 3, -ws, ws);
    if (c.bias) d.b = random_values<float>(dirs * 2 * G * H, seed + 4, -0.5, 0.5);
    if (c.initial_h) d.h0 = random_values<float>(dirs * c.batch * H, seed + 5);
    if (c.initial_c) d.c0 = random_values<float>(dirs * c.batch * H, seed + 6);
    if (c.peepholes) d.p = random_values<float>(dirs * 3 * H, seed + 7, -0.5, 0.5);
    if (c.lengths) {
        d.lengths = random_values<int32_t>(c.batch, seed + 8, 1, double(c.steps));
        d.lengths[0] = int32_t(c.steps);  // at least one full-length row
    }
    const RnnResult ref = reference_rnn(c, d, dirs);

    // X (and the states) batch-major for layout 1.
    std::vector<float> x = d.x, h0 = d.h0, c0 = d.c0;
    Shape x_shape{c.steps, c.batch, c.input}, state_shape{dirs, c.batch, H};
    if (c.batch_major) {
        x_shape = {c.batch, c.steps, c.input};
        state_shape = {c.batch, dirs, H};
        for (int64_t t = 0; t < c.steps; ++t)
            for (int64_t n = 0; n < c.batch; ++n)
                std::copy_n(&d.x[(t * c.batch + n) * c.input], c.input, &x[(n * c.steps + t) * c.input]);
        auto swap_state = [&](const std::vector<float>& s, std::vector<float>& out) {
            for (int64_t dir = 0; dir < dirs; ++dir)
                for (int64_t n = 0; n < c.batch; ++n)
                    std::copy_n(&s[(dir * c.batch + n) * H], H, &out[(n * dirs + dir) * H]);
        };
        if (c.initial_h) swap_state(d.h0, h0);
        if (c.initial_c) swap_state(d.c0, c0);
    }

    NodeBuilder node(name_of(c.cell), 14);
    node.attr_int("hidden_size", H).attr_string("direction", c.direction);
    if (c.batch_major) node.attr_int("layout", 1);
    if (c.cell == Cell::Gru) node.attr_int("linear_before_reset", c.linear_before_reset ? 1 : 0);
    const ValueHandle w = tensor<float>({dirs, G * H, c.input}, d.w), r = tensor<float>({dirs, G * H, H}, d.r);
    node.input(TESS_ELEMENT_FLOAT32);
    if (c.constant_weights) node.constant_input(w).constant_input(r);
    else node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
    std::vector<ValueHandle> inputs{tensor<float>(x_shape, x), c.constant_weights ? nullptr : w,
                                    c.constant_weights ? nullptr : r};
    // Optional inputs in order: B, sequence_lens, initial_h, initial_c, P (omitted ones as null).
    auto optional = [&](bool present, int32_t type, ValueHandle value) {
        if (present) node.input(type);
        else node.omitted_input();
        inputs.push_back(present ? value : nullptr);
    };
    optional(c.bias, TESS_ELEMENT_FLOAT32, c.bias ? tensor<float>({dirs, 2 * G * H}, d.b) : nullptr);
    optional(c.lengths, TESS_ELEMENT_INT32, c.lengths ? tensor<int32_t>({c.batch}, d.lengths) : nullptr);
    optional(c.initial_h, TESS_ELEMENT_FLOAT32, c.initial_h ? tensor<float>(state_shape, h0) : nullptr);
    if (c.cell == Cell::Lstm) {
        optional(c.initial_c, TESS_ELEMENT_FLOAT32, c.initial_c ? tensor<float>(state_shape, c0) : nullptr);
        optional(c.peepholes, TESS_ELEMENT_FLOAT32, c.peepholes ? tensor<float>({dirs, 3 * H}, d.p) : nullptr);
    }
    node.output(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_FLOAT32);
    if (c.cell == Cell::Lstm) node.output(TESS_ELEMENT_FLOAT32);
    const auto out = run_node(testing::registry_with<register_rnn_kernels>(), node, inputs);

    const std::string what = std::string(name_of(c.cell)) + " " + c.direction + " steps=" + std::to_string(c.steps) +
                             " batch=" + std::to_string(c.batch) + " input=" + std::to_string(c.input) +
                             " hidden=" + std::to_string(H) + " lbr=" + std::to_string(c.linear_before_reset) +
                             " layout=" + std::to_string(c.batch_major) + " lengths=" + std::to_string(c.lengths);
    const double tolerance = 1e-5;
    if (c.batch_major) {
        EXPECT_EQ(dims_of(out[0]), (Shape{c.batch, c.steps, dirs, H})) << what;
        expect_near_all(values_of<float>(*out[0]), to_batch_major(ref.y, c.steps, dirs, c.batch, H), tolerance,
                        what + " Y");
        expect_near_all(values_of<float>(*out[1]), to_batch_major(ref.y_h, 1, dirs, c.batch, H), tolerance,
                        what + " Y_h");
        if (c.cell == Cell::Lstm)
            expect_near_all(values_of<float>(*out[2]), to_batch_major(ref.y_c, 1, dirs, c.batch, H), tolerance,
                            what + " Y_c");
    } else {
        EXPECT_EQ(dims_of(out[0]), (Shape{c.steps, dirs, c.batch, H})) << what;
        expect_near_all(values_of<float>(*out[0]), ref.y, tolerance, what + " Y");
        expect_near_all(values_of<float>(*out[1]), ref.y_h, tolerance, what + " Y_h");
        if (c.cell == Cell::Lstm) expect_near_all(values_of<float>(*out[2]), ref.y_c, tolerance, what + " Y_c");
    }
}

// Shapes (steps, batch, input, hidden): ones, odd sizes, and hidden sizes around the panel widths.
const int64_t kShapes[][4] = {{1, 1, 1, 1}, {5, 3, 4, 7}, {7, 2, 17, 16}, {4, 5, 33, 65}, {3, 1, 8, 129},
                              {9, 4, 3, 31}, {2, 17, 5, 9}};

void run_all_variants(Cell cell, bool linear_before_reset, uint32_t seed) {
    int variant = 0;
    for (const auto& s : kShapes) {
        for (const char* direction : {"forward", "reverse", "bidirectional"}) {
            ++variant;
            RnnCase c{.cell = cell, .steps = s[0], .batch = s[1], .input = s[2], .hidden = s[3]};
            c.direction = direction;
            c.linear_before_reset = linear_before_reset;
            // Rotate the optional features over the variants so each appears with every direction.
            c.bias = variant % 4 != 0;
            c.initial_h = variant % 2 == 0;
            c.initial_c = variant % 3 != 0;
            c.peepholes = cell == Cell::Lstm && variant % 2 == 1;
            c.lengths = variant % 3 == 1 || variant % 5 == 0;
            c.batch_major = variant % 4 == 2;
            c.constant_weights = variant % 3 == 2;
            run_rnn_case(c, seed + uint32_t(variant) * 17);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

TEST(RnnOps, RnnMatchesReference) { run_all_variants(Cell::Rnn, false, 10); }
TEST(RnnOps, GruMatchesReference) { run_all_variants(Cell::Gru, false, 20); }
TEST(RnnOps, GruLinearBeforeResetMatchesReference) { run_all_variants(Cell::Gru, true, 30); }
TEST(RnnOps, LstmMatchesReference) { run_all_variants(Cell::Lstm, false, 40); }

// Rows shorter than the sequence (all but the first): Y is zero past each row's length and Y_h holds the state after its last step.
TEST(RnnOps, SequenceLengthsShorterThanSteps) {
    for (Cell cell : {Cell::Rnn, Cell::Gru, Cell::Lstm}) {
        for (const char* direction : {"forward", "reverse", "bidirectional"}) {
            RnnCase c{.cell = cell, .steps = 6, .batch = 5, .input = 3, .hidden = 5};
            c.direction = direction;
            c.lengths = true;
            c.initial_h = c.initial_c = true;
            run_rnn_case(c, 77);
        }
    }
}

}  // namespace
}  // namespace tessera::cpu
