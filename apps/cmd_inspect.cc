// `tessera inspect`: how a model is partitioned across providers, without running it.  Prints every partition (its
// provider, nodes, boundary tensors and the copies it costs per run) as text or JSON, and draws the plan with
// Graphviz (--dot, --svg).  When some nodes cannot be run by any listed provider, the session error that names them
// and every provider's reason is reported instead.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include "cli.h"

extern char** environ;

namespace fs = std::filesystem;

namespace tessera::cli {
namespace {

constexpr const char* kInspectHelp =
    "Usage: tessera inspect MODEL [options]\n"
    "\n"
    "Creates a session for MODEL (loading, optimizing, partitioning and compiling it, but not running it) and\n"
    "prints the partition plan: every partition in execution order with its provider, its nodes, the tensors it\n"
    "reads from and hands to other partitions, and how many of its inputs are copied across memory kinds on every\n"
    "run.  When nodes are left that no listed provider runs, prints each with every provider's reason and exits 1.\n"
    "\n"
    "Options:\n"
    "  --providers A,B     provider priority list, most preferred first (default: every usable one, CPU last)\n"
    "  --strict            no fallback: an unclaimed node or an unusable listed provider is an error\n"
    "  --optimization N    graph optimization level: 0 disabled, 1 basic, 2 extended (fusions), 3 all (default)\n"
    "  --optimized-model-out FILE\n"
    "                      save the graph the optimizer produced (before partitioning) to FILE as an ONNX model\n"
    "  --threads N         intra-op threads of the session (default 1: inspect runs nothing)\n"
    "  --json              print the report as one JSON object\n"
    "  --dot FILE          write the plan as a Graphviz graph: partitions colored by provider, tensors between\n"
    "                      them as edges, boundary copies as dashed red edges labelled 'copy'\n"
    "  --svg FILE          render that graph to SVG with Graphviz's `dot -Tsvg`\n";

struct InspectFlags {
    std::optional<std::string> model;
    SessionFlags session;
    bool json = false;
    std::string dot_file;
    std::string svg_file;
    EnvFlags env;
    bool help = false;
};

InspectFlags parse_flags(Args& args) {
    InspectFlags flags;
    while (!args.done()) {
        if (args.flag("-h") || args.flag("--help")) {
            flags.help = true;
            return flags;
        }
        if (flags.env.parse(args) || flags.session.parse(args) || args.option("--dot", flags.dot_file) ||
            args.option("--svg", flags.svg_file))
            continue;
        if (args.flag("--json")) {
            flags.json = true;
        } else if (args.at_option()) {
            throw UsageError("unknown option '" + args.peek() + "' for 'inspect' (try 'tessera inspect --help')");
        } else if (flags.model) {
            throw UsageError("'inspect' takes one MODEL, got '" + *flags.model + "' and '" + args.peek() + "'");
        } else {
            flags.model = args.next();
        }
    }
    if (!flags.model) throw UsageError("'inspect' needs a MODEL (try 'tessera inspect --help')");
    if (!flags.session.profile.empty())
        throw UsageError("'inspect' runs nothing to profile: --profile is for run and bench");
    if (!flags.dot_file.empty() && flags.dot_file == flags.svg_file)
        throw UsageError("--dot and --svg name the same file");
    return flags;
}

// ---- The plan, and what follows from it ----------------------------------------------------------------------------

constexpr size_t kCaller = SIZE_MAX;  // "produced by the caller": a graph input or an initializer

struct Plan {
    std::vector<PartitionInfo> partitions;
    std::vector<std::string> graph_inputs, graph_outputs;
    std::vector<std::string> providers;  // those that own partitions, in order of first appearance
    std::map<std::string, size_t> producer;  // tensor -> partition that outputs it
    std::map<std::string, bool> host_memory;  // provider -> computes in host memory
    size_t producer_of(const std::string& tensor) const {
        auto it = producer.find(tensor);
        return it == producer.end() ? kCaller : it->second;
    }
    size_t total_copies() const {
        size_t n = 0;
        for (const PartitionInfo& p : partitions) n += p.copy_count;
        return n;
    }
    // Whether input `i` of partition `p` reaches it through a copy (the plan says so per input).
    std::optional<bool> input_copied(size_t p, size_t i) const {
        const PartitionInfo& part = partitions[p];
        if (i >= part.input_copied.size()) return std::nullopt;
        return part.input_copied[i];
    }
    // Whether graph output `name` leaves a provider's own memory (one more copy per run, not in copy_count).
    std::optional<bool> output_copied(const std::string& name) const {
        const size_t from = producer_of(name);
        if (from == kCaller) return false;
        if (host_memory.empty()) return std::nullopt;
        return !host_memory.at(partitions[from].provider);
    }
};

Plan make_plan(const Session& session) {
    Plan plan;
    plan.partitions = session.partitions();
    for (const ValueInfo& info : session.inputs()) plan.graph_inputs.push_back(info.name);
    for (const ValueInfo& info : session.outputs()) plan.graph_outputs.push_back(info.name);
    for (size_t p = 0; p < plan.partitions.size(); ++p) {
        const PartitionInfo& part = plan.partitions[p];
        if (std::find(plan.providers.begin(), plan.providers.end(), part.provider) == plan.providers.end())
            plan.providers.push_back(part.provider);
        for (const std::string& out : part.outputs) plan.producer.emplace(out, p);
    }
    for (const PartitionInfo& part : plan.partitions)
        if (!part.memory_kind.empty()) plan.host_memory[part.provider] = part.memory_kind == TESS_HOST_MEMORY_NAME;
    return plan;
}

// "Conv x3, Relu x2" in first-seen order.
std::string op_summary(const PartitionInfo& p, size_t limit = 6) {
    std::vector<std::pair<std::string, size_t>> counts;
    for (const std::string& op : p.node_ops) {
        auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == op; });
        if (it == counts.end()) counts.emplace_back(op, 1);
        else ++it->second;
    }
    std::string out;
    for (size_t i = 0; i < counts.size() && i < limit; ++i)
        out += (i ? ", " : "") + counts[i].first + (counts[i].second > 1 ? " x" + std::to_string(counts[i].second) : "");
    if (counts.size() > limit) out += ", ...";
    return out;
}

std::string joined(const std::vector<std::string>& items, const char* separator = ", ") {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
    return out;
}

// ---- Reports ---------------------------------------------------------------------------------------------------------

struct Outcome {
    std::string model;
    std::vector<std::string> requested;  // the priority list used
    bool strict = false;
    std::optional<Plan> plan;
    std::optional<Error> error;  // session creation failed
};

// The unclaimed-node error lists one node per " | "-separated item; shown one per line (display only: the text is
// printed whole whatever its layout).
std::string error_lines(const std::string& message, const char* indent) {
    std::string out = indent;
    for (size_t i = 0; i < message.size(); ++i) {
        if (message.compare(i, 3, " | ") == 0) {
            out += "\n";
            out += indent;
            i += 2;
        } else {
            out += message[i];
        }
    }
    return out;
}

void print_text(const Outcome& o) {
    std::printf("model: %s\n", o.model.c_str());
    std::printf("providers (priority order): %s%s\n", o.requested.empty() ? "(none)" : joined(o.requested).c_str(),
                o.strict ? " (strict)" : "");
    if (o.error) {
        std::printf("no session: %s\n", o.error->code_name());
        std::printf("%s\n", error_lines(o.error->what(), "  ").c_str());
        return;
    }
    const Plan& plan = *o.plan;
    size_t nodes = 0;
    for (const PartitionInfo& p : plan.partitions) nodes += p.node_names.size();
    std::printf("partitions: %zu (%zu nodes), boundary copies per run: %zu inputs", plan.partitions.size(), nodes,
                plan.total_copies());
    size_t output_copies = 0;
    for (const std::string& out : plan.graph_outputs) output_copies += plan.output_copied(out).value_or(false);
    if (output_copies) std::printf(" + %zu graph outputs", output_copies);
    std::printf("\n");
    for (size_t i = 0; i < plan.partitions.size(); ++i) {
        const PartitionInfo& p = plan.partitions[i];
        std::printf("  [%zu] %-8s %zu op%s: %s\n", i, p.provider.c_str(), p.node_names.size(),
                    p.node_names.size() == 1 ? "" : "s", op_summary(p).c_str());
        std::vector<std::string> inputs;
        for (size_t k = 0; k < p.inputs.size(); ++k) {
            const size_t from = plan.producer_of(p.inputs[k]);
            std::string item = p.inputs[k] + (from == kCaller ? " (graph input)" : " (from [" + std::to_string(from) + "])");
            if (plan.input_copied(i, k).value_or(false)) item += " copied";
            inputs.push_back(item);
        }
        std::printf("        inputs:  %s\n", inputs.empty() ? "(none)" : joined(inputs).c_str());
        std::vector<std::string> outputs;
        for (const std::string& out : p.outputs) {
            const bool graph_output =
                std::find(plan.graph_outputs.begin(), plan.graph_outputs.end(), out) != plan.graph_outputs.end();
            outputs.push_back(out + (graph_output ? (plan.output_copied(out).value_or(false) ? " (graph output, copied)"
                                                                                            : " (graph output)")
                                                  : ""));
        }
        std::printf("        outputs: %s\n", outputs.empty() ? "(none)" : joined(outputs).c_str());
        std::printf("        copies per run: %zu\n", p.copy_count);
    }
    std::printf("by provider:\n");
    for (const std::string& provider : plan.providers) {
        size_t parts = 0, ops = 0, copies = 0;
        for (const PartitionInfo& p : plan.partitions)
            if (p.provider == provider) {
                ++parts;
                ops += p.node_names.size();
                copies += p.copy_count;
            }
        std::string memory;
        if (!plan.host_memory.empty()) memory = plan.host_memory.at(provider) ? ", host memory" : ", own memory";
        std::printf("  %-8s %zu partition%s, %zu op%s, %zu input copies per run%s\n", provider.c_str(), parts,
                    parts == 1 ? "" : "s", ops, ops == 1 ? "" : "s", copies, memory.c_str());
    }
    for (const std::string& provider : o.requested)
        if (std::find(plan.providers.begin(), plan.providers.end(), provider) == plan.providers.end())
            std::printf("  %-8s no partition\n", provider.c_str());
}

void print_json(const Outcome& o) {
    std::printf("{\n  \"model\": %s,\n  \"providers\": %s,\n  \"strict\": %s,\n", json_string(o.model).c_str(),
                json_list(o.requested).c_str(), o.strict ? "true" : "false");
    if (o.error) {
        std::printf("  \"ok\": false,\n  \"error\": {\"code\": %s, \"message\": %s}\n}\n",
                    json_string(o.error->code_name()).c_str(), json_string(o.error->what()).c_str());
        return;
    }
    const Plan& plan = *o.plan;
    std::printf("  \"ok\": true,\n  \"error\": null,\n");
    std::printf("  \"graph_inputs\": %s,\n  \"graph_outputs\": [", json_list(plan.graph_inputs).c_str());
    for (size_t i = 0; i < plan.graph_outputs.size(); ++i) {
        const size_t from = plan.producer_of(plan.graph_outputs[i]);
        const std::optional<bool> copied = plan.output_copied(plan.graph_outputs[i]);
        std::printf("%s{\"name\": %s, \"partition\": %s, \"copied\": %s}", i ? ", " : "",
                    json_string(plan.graph_outputs[i]).c_str(),
                    from == kCaller ? "null" : std::to_string(from).c_str(),
                    copied ? (*copied ? "true" : "false") : "null");
    }
    std::printf("],\n  \"partitions\": [");
    for (size_t i = 0; i < plan.partitions.size(); ++i) {
        const PartitionInfo& p = plan.partitions[i];
        std::printf("%s\n    {\"index\": %zu, \"provider\": %s, \"node_count\": %zu, \"copy_count\": %zu,\n",
                    i ? "," : "", i, json_string(p.provider).c_str(), p.node_names.size(), p.copy_count);
        std::printf("     \"nodes\": [");
        for (size_t n = 0; n < p.node_names.size(); ++n)
            std::printf("%s{\"name\": %s, \"op\": %s}", n ? ", " : "", json_string(p.node_names[n]).c_str(),
                        json_string(p.node_ops[n]).c_str());
        std::printf("],\n     \"inputs\": [");
        for (size_t k = 0; k < p.inputs.size(); ++k) {
            const size_t from = plan.producer_of(p.inputs[k]);
            const std::optional<bool> copied = plan.input_copied(i, k);
            std::printf("%s{\"name\": %s, \"from\": %s, \"copied\": %s}", k ? ", " : "", json_string(p.inputs[k]).c_str(),
                        from == kCaller ? "null" : std::to_string(from).c_str(),
                        copied ? (*copied ? "true" : "false") : "null");
        }
        std::printf("],\n     \"outputs\": %s}", json_list(p.outputs).c_str());
    }
    std::printf("%s],\n  \"by_provider\": {", plan.partitions.empty() ? "" : "\n  ");
    for (size_t k = 0; k < plan.providers.size(); ++k) {
        size_t parts = 0, ops = 0, copies = 0;
        for (const PartitionInfo& p : plan.partitions)
            if (p.provider == plan.providers[k]) {
                ++parts;
                ops += p.node_names.size();
                copies += p.copy_count;
            }
        const char* memory = plan.host_memory.empty() ? "null" : plan.host_memory.at(plan.providers[k]) ? "true" : "false";
        std::printf("%s\n    %s: {\"partitions\": %zu, \"nodes\": %zu, \"copy_count\": %zu, \"host_memory\": %s}",
                    k ? "," : "", json_string(plan.providers[k]).c_str(), parts, ops, copies, memory);
    }
    std::printf("%s},\n  \"copy_count\": %zu\n}\n", plan.providers.empty() ? "" : "\n  ", plan.total_copies());
}

// ---- Graphviz ---------------------------------------------------------------------------------------------------------

std::string dot_string(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

// A fill color per provider: cpu light blue, the others from a fixed palette in plan order.
std::string provider_color(const Plan& plan, const std::string& provider) {
    static const char* const palette[] = {"#fdae6b", "#a1d99b", "#bcbddc", "#fa9fb5", "#fee391", "#9ecae1", "#d9d9d9"};
    if (provider == "cpu") return "#c6dbef";
    size_t k = 0;
    for (const std::string& p : plan.providers) {
        if (p == provider) break;
        if (p != "cpu") ++k;
    }
    return palette[k % (sizeof palette / sizeof palette[0])];
}

std::string label_escape(const std::string& text) {
    std::string out;
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

// Edge labels list at most a few tensor names, one per line: the names are escaped, the line breaks ("\n" in DOT)
// are not.
std::string edge_label(const std::vector<std::string>& tensors, bool copy) {
    std::string label = copy ? "copy: " : "";
    for (size_t i = 0; i < tensors.size() && i < 3; ++i) label += (i ? "\\n" : "") + label_escape(tensors[i]);
    if (tensors.size() > 3) label += "\\n+" + std::to_string(tensors.size() - 3) + " more";
    return label;
}

std::string make_dot(const Outcome& o) {
    const Plan& plan = *o.plan;
    std::string dot = "digraph tessera_plan {\n";
    dot += "  graph [rankdir=TB, fontname=\"Helvetica\", label=" + dot_string("tessera inspect " + o.model) +
           ", labelloc=t];\n";
    dot += "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n";
    dot += "  edge [fontname=\"Helvetica\", fontsize=8];\n";
    // Legend: one swatch per provider.
    dot += "  subgraph cluster_legend {\n    label=\"providers\"; style=dashed; fontsize=10;\n";
    for (size_t k = 0; k < plan.providers.size(); ++k)
        dot += "    legend_" + std::to_string(k) + " [label=" + dot_string(plan.providers[k]) + ", fillcolor=\"" +
               provider_color(plan, plan.providers[k]) + "\"];\n";
    dot += "  }\n";
    std::map<std::string, size_t> input_index;
    for (size_t i = 0; i < plan.graph_inputs.size(); ++i) {
        input_index[plan.graph_inputs[i]] = i;
        dot += "  in_" + std::to_string(i) + " [shape=ellipse, style=solid, label=" + dot_string(plan.graph_inputs[i]) +
               "];\n";
    }
    for (size_t i = 0; i < plan.partitions.size(); ++i) {
        const PartitionInfo& p = plan.partitions[i];
        std::string label = "[" + std::to_string(i) + "] " + p.provider + "\\n" +
                            std::to_string(p.node_names.size()) + (p.node_names.size() == 1 ? " op: " : " ops: ") +
                            label_escape(op_summary(p, 4));
        if (p.copy_count != 0)
            label += "\\n" + std::to_string(p.copy_count) + (p.copy_count == 1 ? " input copy" : " input copies");
        dot += "  p" + std::to_string(i) + " [label=\"" + label + "\", fillcolor=\"" + provider_color(plan, p.provider) +
               "\"];\n";
    }
    // Edges: one per (source, destination, copied or not), labelled with the tensors.
    struct EdgeKey {
        std::string from, to;
        int copy;  // 1 copied, 0 not, -1 unknown
        bool operator<(const EdgeKey& o) const { return std::tie(from, to, copy) < std::tie(o.from, o.to, o.copy); }
    };
    std::map<EdgeKey, std::vector<std::string>> edges;
    for (size_t i = 0; i < plan.partitions.size(); ++i) {
        const PartitionInfo& p = plan.partitions[i];
        for (size_t k = 0; k < p.inputs.size(); ++k) {
            const size_t from = plan.producer_of(p.inputs[k]);
            std::string source;
            if (from != kCaller) {
                source = "p" + std::to_string(from);
            } else {
                auto it = input_index.find(p.inputs[k]);
                if (it == input_index.end()) continue;  // a constant the caller may override: not drawn
                source = "in_" + std::to_string(it->second);
            }
            const std::optional<bool> copied = plan.input_copied(i, k);
            edges[{source, "p" + std::to_string(i), copied ? int(*copied) : -1}].push_back(p.inputs[k]);
        }
    }
    for (size_t i = 0; i < plan.graph_outputs.size(); ++i) {
        const std::string& name = plan.graph_outputs[i];
        dot += "  out_" + std::to_string(i) + " [shape=ellipse, style=solid, label=" + dot_string(name) + "];\n";
        const size_t from = plan.producer_of(name);
        std::string source;
        if (from != kCaller) source = "p" + std::to_string(from);
        else if (input_index.count(name)) source = "in_" + std::to_string(input_index[name]);
        else continue;
        const std::optional<bool> copied = plan.output_copied(name);
        edges[{source, "out_" + std::to_string(i), copied ? int(*copied) : -1}].push_back(name);
    }
    for (const auto& [key, tensors] : edges) {
        std::string attributes = "label=\"" + edge_label(tensors, key.copy == 1) + "\"";
        if (key.copy == 1) attributes += ", style=dashed, color=red, fontcolor=red, penwidth=1.5";
        dot += "  " + key.from + " -> " + key.to + " [" + attributes + "];\n";
    }
    dot += "}\n";
    return dot;
}

void write_text_file(const std::string& path, const std::string& text) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    if (!file) throw Error(TESS_STATUS_NOT_FOUND, "cannot write '" + path + "'");
    file << text;
    if (!file.flush()) throw Error(TESS_STATUS_RUNTIME_ERROR, "cannot write '" + path + "'");
}

// Runs `dot -Tsvg -o SVG DOT` (no shell involved).
void render_svg(const std::string& dot_path, const std::string& svg_path) {
    std::vector<std::string> argv_strings = {"dot", "-Tsvg", "-o", svg_path, dot_path};
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawn_error = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
    if (spawn_error != 0)
        throw Error(TESS_STATUS_NOT_FOUND, "cannot run Graphviz 'dot' for --svg (is graphviz installed?): " +
                                               std::string(std::strerror(spawn_error)));
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(TESS_STATUS_RUNTIME_ERROR, "Graphviz 'dot -Tsvg' failed on '" + dot_path + "'");
}

}  // namespace

int inspect_command(Args& args) {
    const InspectFlags flags = parse_flags(args);
    if (flags.help) {
        std::fputs(kInspectHelp, stdout);
        std::fputs(EnvFlags::help(), stdout);
        return 0;
    }

    Env env(flags.env.options());
    Outcome outcome;
    outcome.model = *flags.model;
    outcome.strict = flags.session.strict;
    outcome.requested = flags.session.providers.empty() ? env.providers() : flags.session.providers;
    SessionOptions options;
    flags.session.apply(options);
    if (flags.session.threads < 0) options.intra_op_threads(1);  // nothing runs; compile needs no big pool
    try {
        Session session(env, *flags.model, &options);
        outcome.plan = make_plan(session);
    } catch (const Error& e) {
        // Unclaimed nodes (NOT_IMPLEMENTED) and unusable providers in strict mode are what inspect is asked about:
        // report them.  Anything else (a broken model) is an ordinary error, which --json still reports as JSON so
        // that a tool reading it always gets an object.
        if (e.code() != TESS_STATUS_NOT_IMPLEMENTED && e.code() != TESS_STATUS_UNAVAILABLE && !flags.json) throw;
        outcome.error = e;
    }

    if (flags.json) print_json(outcome);
    else print_text(outcome);
    std::fflush(stdout);
    if (outcome.error) throw Error(outcome.error->code(), "no session for '" + outcome.model + "' (see the report)");

    if (!flags.dot_file.empty() || !flags.svg_file.empty()) {
        const std::string dot = make_dot(outcome);
        std::string dot_path = flags.dot_file;
        std::optional<fs::path> temporary;
        if (dot_path.empty()) {
            temporary = fs::temp_directory_path() / ("tessera-inspect-" + std::to_string(::getpid()) + ".dot");
            dot_path = temporary->string();
        }
        write_text_file(dot_path, dot);
        try {
            if (!flags.svg_file.empty()) render_svg(dot_path, flags.svg_file);
        } catch (...) {
            if (temporary) fs::remove(*temporary);
            throw;
        }
        if (temporary) fs::remove(*temporary);
        if (!flags.json) {
            if (!flags.dot_file.empty()) std::printf("wrote %s\n", flags.dot_file.c_str());
            if (!flags.svg_file.empty()) std::printf("wrote %s\n", flags.svg_file.c_str());
        }
    }
    return 0;
}

}  // namespace tessera::cli
