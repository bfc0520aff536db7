// tessera provider-test: one backend-test case against the provider (op_checks.h).
#include "provider_kit/op_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "onnx_io.h"
#include "provider_kit/isolated.h"

namespace fs = std::filesystem;

namespace tessera::provider_kit {

namespace {

// A failed check: the message names the check.
struct CheckFailed {
    std::string message;
};
[[noreturn]] void failed(const std::string& check, const std::string& why) { throw CheckFailed{check + ": " + why}; }

struct Feeds {
    std::vector<std::string> names;
    std::vector<Value> values;
    std::vector<ValueView> views() const { return std::vector<ValueView>(values.begin(), values.end()); }
};

SessionOptions options_for(const std::vector<std::string>& providers, bool strict) {
    SessionOptions options;
    options.providers(providers).intra_op_threads(1);
    if (strict) options.strict(true);
    return options;
}

// node name -> provider, and the operators the provider under test runs.
struct Plan {
    std::vector<std::pair<std::string, std::string>> assignment;
    std::set<std::string> ops;
};

Plan plan_of(const Session& session, const std::string& provider) {
    Plan plan;
    for (const PartitionInfo& p : session.partitions()) {
        for (size_t n = 0; n < p.node_names.size(); ++n) {
            plan.assignment.emplace_back(p.node_names[n], p.provider);
            if (p.provider == provider) plan.ops.insert(p.node_ops[n]);
        }
    }
    std::sort(plan.assignment.begin(), plan.assignment.end());
    return plan;
}

std::string compare_all(const std::vector<Value>& actual, const std::vector<Value>& expected,
                        const std::vector<std::string>& names, const onnx_io::Tolerance& tolerance) {
    if (actual.size() != expected.size())
        return std::to_string(actual.size()) + " outputs where " + std::to_string(expected.size()) + " were expected";
    for (size_t k = 0; k < expected.size(); ++k) {
        const std::string why = onnx_io::compare_values(actual[k], expected[k], tolerance);
        if (!why.empty()) return "output '" + names[k] + "': " + why;
    }
    return "";
}

// A deep copy through the value's own proto.
Value copy_of(ValueView v) {
    switch (v.kind()) {
        case TESS_VALUE_SEQUENCE:
            return onnx_io::sequence_from_proto(onnx_io::sequence_to_proto(v, "copy"), v.element_type());
        case TESS_VALUE_OPTIONAL:
            return onnx_io::optional_from_proto(onnx_io::optional_to_proto(v, "copy"), v.element_type());
        default: return onnx_io::tensor_from_proto(onnx_io::tensor_to_proto(v, "copy"));
    }
}

// The case's floating-point inputs with noise added (relative, seeded): other values than the expected outputs were
// computed for, which only the reference provider can answer for.
Feeds perturbed(const Feeds& feeds, const std::string& seed_text) {
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(seed_text)));
    std::normal_distribution<float> noise(0.0f, 0.05f);
    Feeds out;
    out.names = feeds.names;
    for (const Value& v : feeds.values) {
        if (v.kind() != TESS_VALUE_TENSOR ||
            (v.element_type() != TESS_ELEMENT_FLOAT32 && v.element_type() != TESS_ELEMENT_FLOAT64)) {
            out.values.push_back(copy_of(v));
            continue;
        }
        Value copy = Value::tensor(v.element_type(), v.dims());
        const size_t n = v.element_count();
        if (v.element_type() == TESS_ELEMENT_FLOAT32) {
            const float* src = v.data<float>();
            float* dst = copy.data<float>();
            for (size_t i = 0; i < n; ++i) dst[i] = src[i] + noise(rng) * (1.0f + std::fabs(src[i]));
        } else {
            const double* src = v.data<double>();
            double* dst = copy.data<double>();
            for (size_t i = 0; i < n; ++i) dst[i] = src[i] + noise(rng) * (1.0 + std::fabs(src[i]));
        }
        out.values.push_back(std::move(copy));
    }
    return out;
}

// ---- Another shape ----------------------------------------------------------------------------------------------

// The case at another batch size: when every input is a non-string tensor whose first dimension is the same
// d >= 1, the model with that dimension made symbolic in every input (and the outputs' shapes left to inference) and
// inputs of d + 1 rows (row k repeats row k mod d, floats with noise).  Empty when the case has no such dimension.
struct Reshaped {
    std::string model_bytes;
    Feeds feeds;
};

std::optional<Reshaped> with_another_batch(const onnx::ModelProto& proto, const Feeds& feeds,
                                           const std::string& seed_text) {
    if (feeds.values.empty() || static_cast<int>(feeds.names.size()) != proto.graph().input_size()) return std::nullopt;
    int64_t batch = -1;
    for (const Value& v : feeds.values) {
        if (v.kind() != TESS_VALUE_TENSOR || v.element_type() == TESS_ELEMENT_STRING || v.dims().empty() ||
            v.byte_size() == 0)
            return std::nullopt;
        const int64_t d = v.dims()[0];
        if (d < 1 || (batch >= 0 && d != batch) || v.byte_size() % static_cast<size_t>(d) != 0) return std::nullopt;
        batch = d;
    }
    onnx::ModelProto model = proto;
    for (auto& input : *model.mutable_graph()->mutable_input()) {
        if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape()) continue;
        auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
        if (shape->dim_size() == 0) return std::nullopt;
        shape->mutable_dim(0)->set_dim_param("tessera_kit_batch");
    }
    for (auto& output : *model.mutable_graph()->mutable_output())
        if (output.type().has_tensor_type()) output.mutable_type()->mutable_tensor_type()->clear_shape();
    model.mutable_graph()->clear_value_info();  // inferred again for the new shapes

    Reshaped r;
    r.model_bytes = model.SerializeAsString();
    r.feeds.names = feeds.names;
    const Feeds noisy = perturbed(feeds, seed_text + "/batch");
    for (const Value& v : noisy.values) {
        std::vector<int64_t> dims = v.dims();
        dims[0] = batch + 1;
        Value grown = Value::tensor(v.element_type(), dims);
        const size_t row = v.byte_size() / static_cast<size_t>(batch);
        for (int64_t k = 0; k <= batch; ++k)
            std::memcpy(static_cast<char*>(grown.raw_data()) + static_cast<size_t>(k) * row,
                        static_cast<const char*>(v.raw_data()) + static_cast<size_t>(k % batch) * row, row);
        r.feeds.values.push_back(std::move(grown));
    }
    return r;
}

// One input of another element type (same shape), or of one more dimension.
Value retyped(ValueView v) {
    const int32_t type = v.element_type() == TESS_ELEMENT_INT64 ? TESS_ELEMENT_FLOAT32 : TESS_ELEMENT_INT64;
    return Value::tensor(static_cast<ElementType>(type), v.dims());
}
Value reranked(ValueView v) {
    std::vector<int64_t> dims = v.dims();
    dims.insert(dims.begin(), 2);
    return Value::tensor(v.element_type(), dims);
}

void expect_error(Session& session, const std::vector<std::string>& names, const std::vector<ValueView>& values,
                  const std::string& what) {
    try {
        session.run(names, values);
    } catch (const Error&) {
        return;  // a status, as it should be
    }
    failed("bad inputs", "a run with " + what + " succeeded instead of returning an error status");
}

void expect_nothing_live(const Env& env, const std::string& provider) {
    TessProviderStats s{};
    s.struct_size = sizeof s;
    if (TessStatus* status = tess_env_provider_stats(env.get(), provider.c_str(), &s)) {
        const std::string message = tess_status_message(status);
        tess_status_release(status);
        failed("accounting", message);
    }
    if (s.live_instances != 0 || s.live_compiled != 0 || s.live_allocations != 0)
        failed("accounting", "after every session and value was released, " + std::to_string(s.live_instances) +
                                 " instances, " + std::to_string(s.live_compiled) + " compiled partitions and " +
                                 std::to_string(s.live_allocations) + " allocations are still alive");
}

// The body of run_case, in the child.  Returns the serialized result.
CaseResult check_case(Env& env, const std::string& case_dir, const CaseSettings& s) {
    CaseResult result;
    result.name = fs::path(case_dir).filename().string();
    const std::string model = case_dir + "/model.onnx";
    bool self_reference = s.provider == s.reference;

    const onnx::ModelProto proto = onnx_io::load_model(model);
    const std::vector<ValueInfo> inputs = onnx_io::graph_inputs(proto);
    const std::vector<ValueInfo> outputs = onnx_io::graph_outputs(proto);
    std::vector<std::string> output_names;
    for (const ValueInfo& o : outputs) output_names.push_back(o.name);

    // The reference runs the case to hold the provider to on other inputs; a case it cannot run (an operator only
    // this provider has) is held to its expected outputs alone.
    const SessionOptions reference_options = options_for({s.reference}, true);
    std::optional<Session> reference;
    if (!self_reference) {
        try {
            reference.emplace(env, model, &reference_options);
        } catch (const Error&) {
            self_reference = true;
        }
    }
    std::vector<std::string> providers = {s.provider};
    if (!self_reference) providers.push_back(s.reference);

    const SessionOptions options = options_for(providers, false);
    Session session(env, model, &options);
    const Plan plan = plan_of(session, s.provider);
    if (plan.ops.empty()) {  // run_case lists the model's operators for a skipped case
        const SessionOptions alone = options_for({s.provider}, true);
        try {
            Session declined(env, model, &alone);
            result.detail = "not claimed";
        } catch (const Error& e) {
            result.detail = e.what();  // names each declined node and the provider's reason
        }
        return result;
    }
    result.ops.assign(plan.ops.begin(), plan.ops.end());
    {
        Session again(env, model, &options);
        if (plan_of(again, s.provider).assignment != plan.assignment)
            failed("capability", "a second session of the same model got another plan: the answers are not stable");
    }

    const onnx_io::Tolerance tolerance = onnx_io::case_tolerance(case_dir);
    std::vector<std::string> data_sets;
    for (const auto& entry : fs::directory_iterator(case_dir))
        if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
            data_sets.push_back(entry.path().string());
    std::sort(data_sets.begin(), data_sets.end());
    if (data_sets.empty()) failed("expected outputs", "no test_data_set_* folder");

    Feeds first;
    for (const std::string& data_set : data_sets) {
        Feeds feeds;
        const std::vector<std::string> in_files = onnx_io::numbered_files(data_set, "input_");
        const std::vector<std::string> out_files = onnx_io::numbered_files(data_set, "output_");
        for (size_t k = 0; k < in_files.size() && k < inputs.size(); ++k) {
            feeds.names.push_back(inputs[k].name);
            feeds.values.push_back(onnx_io::load_value(in_files[k], inputs[k]));
        }
        std::vector<Value> expected;
        for (size_t k = 0; k < out_files.size() && k < outputs.size(); ++k)
            expected.push_back(onnx_io::load_value(out_files[k], outputs[k]));
        const std::vector<std::string> names(output_names.begin(), output_names.begin() + expected.size());
        std::vector<Value> actual;
        try {
            actual = session.run(feeds.names, feeds.views(), names);
        } catch (const Error& e) {
            failed("expected outputs", fs::path(data_set).filename().string() + ": the run failed: " + e.what());
        }
        const std::string why = compare_all(actual, expected, names, tolerance);
        if (!why.empty()) failed("expected outputs", fs::path(data_set).filename().string() + ": " + why);
        if (first.names.empty()) first = std::move(feeds);
    }

    // Randomized inputs against the reference.
    if (!self_reference) {
        const Feeds noisy = perturbed(first, result.name);
        std::vector<Value> want, got;
        std::string reference_error, provider_error;
        try {
            want = reference->run(noisy.names, noisy.views(), output_names);
        } catch (const Error& e) {
            reference_error = e.what();
        }
        try {
            got = session.run(noisy.names, noisy.views(), output_names);
        } catch (const Error& e) {
            provider_error = e.what();
        }
        if (reference_error.empty() != provider_error.empty())
            failed("randomized inputs", reference_error.empty() ? "the run failed: " + provider_error
                                                                : "the run succeeded where the reference failed: " +
                                                                      reference_error);
        if (reference_error.empty()) {
            const std::string why = compare_all(got, want, output_names, tolerance);
            if (!why.empty()) failed("randomized inputs", "against '" + s.reference + "': " + why);
        }
    }

    // Another batch size, against the reference (where the reference accepts it: many operators fix their shapes).
    if (!self_reference) {
        if (std::optional<Reshaped> grown = with_another_batch(proto, first, result.name)) {
            std::vector<Value> want;
            bool reference_ran = false;
            try {
                Session ref = Session::from_bytes(env, grown->model_bytes.data(), grown->model_bytes.size(), case_dir,
                                                  &reference_options);
                want = ref.run(grown->feeds.names, grown->feeds.views(), output_names);
                reference_ran = true;
            } catch (const Error&) {
            }
            if (reference_ran) {
                std::vector<Value> got;
                try {
                    Session varied = Session::from_bytes(env, grown->model_bytes.data(), grown->model_bytes.size(),
                                                         case_dir, &options);
                    got = varied.run(grown->feeds.names, grown->feeds.views(), output_names);
                } catch (const Error& e) {
                    failed("another batch size", std::string("the reference ran it, the provider failed: ") + e.what());
                }
                const std::string why = compare_all(got, want, output_names, tolerance);
                if (!why.empty()) failed("another batch size", "against '" + s.reference + "': " + why);
            }
        }
    }

    // Concurrent runs of one session.
    {
        const std::vector<Value> single = session.run(first.names, first.views(), output_names);
        std::vector<std::string> problems(static_cast<size_t>(s.threads));
        std::vector<std::thread> threads;
        for (int t = 0; t < s.threads; ++t) {
            threads.emplace_back([&, t] {
                try {
                    for (int r = 0; r < 3 && problems[t].empty(); ++r)
                        problems[t] = compare_all(session.run(first.names, first.views(), output_names), single,
                                                  output_names, onnx_io::Tolerance{0.0, 0.0});
                } catch (const std::exception& e) {
                    problems[t] = e.what();
                }
            });
        }
        for (std::thread& t : threads) t.join();
        for (const std::string& p : problems)
            if (!p.empty()) failed("concurrent runs", p);
    }

    // Bad inputs: answered by a status.
    if (!first.names.empty()) {
        std::vector<ValueView> views = first.views();
        std::vector<std::string> names = first.names;
        expect_error(session, std::vector<std::string>(names.begin() + 1, names.end()),
                     std::vector<ValueView>(views.begin() + 1, views.end()), "input '" + names[0] + "' missing");
        if (first.values[0].kind() == TESS_VALUE_TENSOR) {
            const Value wrong_type = retyped(first.values[0]);
            views[0] = wrong_type;
            expect_error(session, names, views, "input '" + names[0] + "' of another element type");
            const Value wrong_rank = reranked(first.values[0]);
            views[0] = wrong_rank;
            if (inputs[0].has_shape) expect_error(session, names, views, "input '" + names[0] + "' of another rank");
        }
    }

    result.verdict = CaseResult::Verdict::Passed;
    return result;
}

std::string serialize(const CaseResult& r) {
    std::string ops;
    for (const std::string& op : r.ops) ops += (ops.empty() ? "" : ",") + op;
    const char verdict = r.verdict == CaseResult::Verdict::Passed   ? 'P'
                         : r.verdict == CaseResult::Verdict::Failed ? 'F'
                                                                    : 'S';
    return std::string(1, verdict) + "\n" + ops + "\n" + r.detail;
}

CaseResult deserialize(const std::string& name, const std::string& text) {
    CaseResult r;
    r.name = name;
    const size_t first = text.find('\n'), second = first == std::string::npos ? first : text.find('\n', first + 1);
    if (text.empty() || second == std::string::npos) {
        r.verdict = CaseResult::Verdict::Failed;
        r.detail = text;
        return r;
    }
    r.verdict = text[0] == 'P' ? CaseResult::Verdict::Passed
                : text[0] == 'F' ? CaseResult::Verdict::Failed
                                 : CaseResult::Verdict::Skipped;
    const std::string ops = text.substr(first + 1, second - first - 1);
    for (size_t start = 0; start < ops.size();) {
        const size_t comma = std::min(ops.find(',', start), ops.size());
        r.ops.push_back(ops.substr(start, comma - start));
        start = comma + 1;
    }
    r.detail = text.substr(second + 1);
    return r;
}

}  // namespace

CaseResult run_case(Env& env, const std::string& case_dir, const CaseSettings& settings) {
    const std::string name = fs::path(case_dir).filename().string();
    const IsolatedOutcome outcome = run_isolated(
        [&] {
            CaseResult r;
            r.name = name;
            try {
                r = check_case(env, case_dir, settings);
                if (r.verdict == CaseResult::Verdict::Passed) expect_nothing_live(env, settings.provider);
            } catch (const CheckFailed& f) {
                r.verdict = CaseResult::Verdict::Failed;
                r.detail = f.message;
            } catch (const std::exception& e) {
                r.verdict = CaseResult::Verdict::Failed;
                r.detail = e.what();
            }
            if (r.ops.empty()) r.ops = onnx_io::model_operators(case_dir + "/model.onnx");
            return serialize(r);
        },
        settings.timeout_seconds);
    if (!outcome.finished) {
        CaseResult r;
        r.name = name;
        r.verdict = CaseResult::Verdict::Failed;
        r.ops = onnx_io::model_operators(case_dir + "/model.onnx");
        r.detail = "the provider " + outcome.failure;
        return r;
    }
    return deserialize(name, outcome.text);
}

}  // namespace tessera::provider_kit
