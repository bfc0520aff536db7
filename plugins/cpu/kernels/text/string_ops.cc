// CPU provider: string operators (StringNormalizer, StringConcat, StringSplit, RegexFullMatch).  String elements
// live in host values and are read and written through the host accessors.  Case changes cover ASCII letters only
// (the "en_US"-style locales ONNX models use); other bytes pass unchanged.
#include <algorithm>
#include <array>
#include <limits>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/broadcast.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

using values::get_string;
using values::set_string;

std::string ascii_lower(std::string_view text) {
    std::string result(text);
    for (char& c : result)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return result;
}

std::string ascii_upper(std::string_view text) {
    std::string result(text);
    for (char& c : result)
        if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
    return result;
}

void require_strings(const Tensor& tensor, std::string_view op) {
    if (tensor.type != TESS_ELEMENT_STRING) throw KernelError(std::string(op) + ": input must be a string tensor");
}

// ---- StringNormalizer --------------------------------------------------------------------------------------------

class StringNormalizerKernel final : public Kernel {
public:
    enum class CaseChange { None, Lower, Upper };

    explicit StringNormalizerKernel(const NodeInfo& info)
        : case_sensitive_(info.attr_int("is_case_sensitive", 0) != 0) {
        const std::string action = info.attr_string("case_change_action", "NONE");
        if (action == "NONE")
            case_change_ = CaseChange::None;
        else if (action == "LOWER")
            case_change_ = CaseChange::Lower;
        else if (action == "UPPER")
            case_change_ = CaseChange::Upper;
        else
            throw KernelError("StringNormalizer: unknown case_change_action '" + action + "'");
        for (const std::string& word : info.attr_strings("stopwords"))
            stopwords_.insert(case_sensitive_ ? word : ascii_lower(word));
    }

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const Tensor& input = ctx.input(0);
        require_strings(input, "StringNormalizer");
        const bool matrix = input.rank() == 2;
        if (!(input.rank() == 1 || (matrix && input.shape[0] == 1)))
            throw KernelError("StringNormalizer: input must have shape [C] or [1, C], got " +
                              shape_string(input.shape));
        std::vector<std::string> kept;
        for (int64_t i = 0; i < input.size(); ++i) {
            const std::string_view word = get_string(h, input.value, size_t(i));
            if (!stopwords_.empty() && stopwords_.count(case_sensitive_ ? std::string(word) : ascii_lower(word)))
                continue;
            switch (case_change_) {
                case CaseChange::None: kept.emplace_back(word); break;
                case CaseChange::Lower: kept.push_back(ascii_lower(word)); break;
                case CaseChange::Upper: kept.push_back(ascii_upper(word)); break;
            }
        }
        // Everything filtered out: a single empty string, keeping the input's rank.
        if (kept.empty()) kept.emplace_back();
        const int64_t count = int64_t(kept.size());
        Tensor& output = ctx.output(0, TESS_ELEMENT_STRING, matrix ? Shape{1, count} : Shape{count});
        for (size_t i = 0; i < kept.size(); ++i) set_string(h, output.value, i, kept[i]);
    }

private:
    bool case_sensitive_;
    CaseChange case_change_ = CaseChange::None;
    std::unordered_set<std::string> stopwords_;
};

// ---- StringConcat ------------------------------------------------------------------------------------------------

class StringConcatKernel final : public Kernel {
public:
    explicit StringConcatKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        require_strings(a, "StringConcat");
        require_strings(b, "StringConcat");
        const BroadcastPlan plan("StringConcat", {&a.shape, &b.shape});
        Tensor& output = ctx.output(0, TESS_ELEMENT_STRING, plan.output_shape());
        std::string joined;
        // Serial: string elements go through the host one at a time.
        for_each_broadcast_run<2>(plan, nullptr, [&](int64_t out, const std::array<int64_t, 2>& in, int64_t count) {
            const int64_t step_a = plan.inner_contiguous(0) ? 1 : 0;
            const int64_t step_b = plan.inner_contiguous(1) ? 1 : 0;
            for (int64_t k = 0; k < count; ++k) {
                joined = get_string(h, a.value, size_t(in[0] + k * step_a));
                joined += get_string(h, b.value, size_t(in[1] + k * step_b));
                set_string(h, output.value, size_t(out + k), joined);
            }
        });
    }
};

// ---- StringSplit -------------------------------------------------------------------------------------------------

class StringSplitKernel final : public Kernel {
public:
    explicit StringSplitKernel(const NodeInfo& info)
        : delimiter_(info.attr_string("delimiter", "")), maxsplit_(info.attr_int("maxsplit", -1)) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const Tensor& input = ctx.input(0);
        require_strings(input, "StringSplit");
        std::vector<std::vector<std::string_view>> pieces(size_t(input.size()));
        size_t widest = 0;
        for (size_t i = 0; i < pieces.size(); ++i) {
            pieces[i] = split(get_string(h, input.value, i));
            widest = std::max(widest, pieces[i].size());
        }
        Shape shape = input.shape;
        shape.push_back(int64_t(widest));
        Tensor& substrings = ctx.output(0, TESS_ELEMENT_STRING, shape);
        Tensor& lengths = ctx.output(1, TESS_ELEMENT_INT64, input.shape);
        for (size_t i = 0; i < pieces.size(); ++i) {
            lengths.ptr<int64_t>()[i] = int64_t(pieces[i].size());
            for (size_t j = 0; j < widest; ++j)
                set_string(h, substrings.value, i * widest + j,
                           j < pieces[i].size() ? pieces[i][j] : std::string_view());
        }
    }

private:
    // Python's str.split: with a delimiter every occurrence splits (empty pieces kept); without one, runs of
    // whitespace split and leading/trailing whitespace is dropped.  At most maxsplit splits when it is >= 0.
    std::vector<std::string_view> split(std::string_view text) const {
        std::vector<std::string_view> result;
        int64_t splits_left = maxsplit_ < 0 ? std::numeric_limits<int64_t>::max() : maxsplit_;
        if (!delimiter_.empty()) {
            size_t start = 0;
            for (size_t at; splits_left > 0 && (at = text.find(delimiter_, start)) != std::string_view::npos;
                 --splits_left) {
                result.push_back(text.substr(start, at - start));
                start = at + delimiter_.size();
            }
            result.push_back(text.substr(start));
            return result;
        }
        const auto is_space = [](char c) {
            return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
        };
        size_t at = 0;
        while (true) {
            while (at < text.size() && is_space(text[at])) ++at;
            if (at == text.size()) break;
            if (splits_left == 0) {
                size_t end = text.size();
                while (end > at && is_space(text[end - 1])) --end;
                result.push_back(text.substr(at, end - at));
                break;
            }
            size_t end = at;
            while (end < text.size() && !is_space(text[end])) ++end;
            result.push_back(text.substr(at, end - at));
            at = end;
            --splits_left;
        }
        return result;
    }

    std::string delimiter_;
    int64_t maxsplit_;
};

// ---- RegexFullMatch ----------------------------------------------------------------------------------------------

class RegexFullMatchKernel final : public Kernel {
public:
    // ONNX specifies RE2 syntax; std::regex's ECMAScript grammar agrees on the common subset (classes, \w \d \b,
    // groups, alternation, bounded repetition).
    explicit RegexFullMatchKernel(const NodeInfo& info) {
        const std::string pattern = info.attr_string("pattern", "");
        try {
            regex_ = std::regex(pattern, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
            throw KernelError("RegexFullMatch: invalid pattern '" + pattern + "': " + e.what());
        }
    }

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = ctx.host();
        const Tensor& input = ctx.input(0);
        require_strings(input, "RegexFullMatch");
        Tensor& output = ctx.output(0, TESS_ELEMENT_BOOL, input.shape);
        bool* out = output.ptr<bool>();
        for (int64_t i = 0; i < input.size(); ++i) {
            const std::string_view text = get_string(h, input.value, size_t(i));
            out[i] = std::regex_match(text.begin(), text.end(), regex_);
        }
    }

private:
    std::regex regex_;
};

}  // namespace

void register_string_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> strings{TESS_ELEMENT_STRING};
    registry.add(
        {"", "StringNormalizer", 10, 0, {{0, strings}}, KernelMemory::Normal, make_factory<StringNormalizerKernel>()});
    registry.add({"",
                  "StringConcat",
                  20,
                  0,
                  {{0, strings}, {1, strings}},
                  KernelMemory::Normal,
                  make_factory<StringConcatKernel>()});
    registry.add({"", "StringSplit", 20, 0, {{0, strings}}, KernelMemory::Normal, make_factory<StringSplitKernel>()});
    registry.add(
        {"", "RegexFullMatch", 20, 0, {{0, strings}}, KernelMemory::Normal, make_factory<RegexFullMatchKernel>()});
}

}  // namespace tessera::cpu
