// CUDA provider: the operator table, keyed like the CPU provider's kernel registry.  An entry is
// (domain, op_type, since_version, end_version, allowed input element types) -> check + build.  A node matches an
// entry when its domain is the entry's ("" and "ai.onnx" are the same), the model's opset for that domain is in
// [since_version, end_version] and every typed input has an allowed element type (absent inputs and unknown types
// pass); among matches the entry with the highest since_version wins.  The entry's check then looks at attributes,
// constants and the finer type rules (all inputs of one type, ...) and may still decline the node.
//
// Each operator family registers its entries with one function (register_*_ops); registry.cc builds the provider's
// table from all of them and answers check_node / build_step (graph.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/op_support.h"

namespace tessera::cuda::ops {

using Fused = std::vector<const TessNodeView*>;
// Empty when the node can run, else why not.
using CheckFn = std::function<std::string(const Node&)>;
// The step for the node (and for the nodes it fuses, which it appends to the list).
using BuildFn = std::function<std::unique_ptr<Step>(BuildContext&, const Node&, Fused&)>;

using TypeList = std::vector<int32_t>;
// Allowed element types per input index; an input not listed, or listed with an empty list, may have any type.
using InputTypes = std::vector<std::pair<size_t, TypeList>>;

// The types the kernels compute in.
inline TypeList float_types() { return {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16}; }
// Input 0 is float32 or float16 (the rule of every operator the provider runs).
inline InputTypes float_x() { return {{0, float_types()}}; }

struct OpEntry {
    std::string domain;     // "" for ai.onnx
    std::string op_type;
    int since_version = 1;  // first opset of the domain this entry implements
    int end_version = 0;    // last one; 0 = open-ended
    InputTypes input_types;
    CheckFn check;
    BuildFn build;
};

struct OpFns {
    CheckFn check;
    BuildFn build;
};

class OpTable {
public:
    void add(OpEntry entry);
    // An ai.onnx operator.
    void add(const char* op_type, int since_version, int end_version, InputTypes input_types, OpFns fns);

    // The entry for this node, or nullptr with `why` filled (names the operator, the opset and the input types).
    const OpEntry* find(const TessNodeView& node, std::string* why) const;
    size_t size() const { return entries_.size(); }
    const std::vector<OpEntry>& entries() const { return entries_; }

private:
    static std::string key(std::string_view domain, std::string_view op_type);

    std::vector<OpEntry> entries_;
    std::unordered_map<std::string, std::vector<size_t>> by_op_;  // key(domain, op_type) -> indices into entries_
};

// The families (one file each under ops/).
void register_elementwise_ops(OpTable& table);    // elementwise.cc: activations, Clip, broadcasting binary, variadic
void register_normalization_ops(OpTable& table);  // normalization.cc: Softmax, LogSoftmax, LayerNormalization,
                                                  // BatchNormalization, LRN
void register_pooling_ops(OpTable& table);        // pooling.cc: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
void register_conv_ops(OpTable& table);           // conv.cc: Conv (cuDNN)
void register_matmul_ops(OpTable& table);         // matmul.cc: Gemm, MatMul (cuBLAS)
void register_data_movement_ops(OpTable& table);  // data_movement.cc: Transpose, Concat, Reshape, Flatten, Squeeze,
                                                  // Unsqueeze, Identity

// The provider's table: every family's entries (registry.cc), built on first use.
const OpTable& op_table();

}  // namespace tessera::cuda::ops
