// CUDA provider implementation: errors, shapes and runtime tensors shared by every file of libtessera_cuda_impl.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels.h"
#include "tessera/plugin_support.hpp"
#include "tessera/provider.h"

namespace tessera::cuda {

// The core's host functions (set once by tessera_cuda_impl_open).
const TessHostApi& host();
void set_host(const TessHostApi* api);

// Failures inside the implementation are exceptions with a status code; the ABI functions turn them into statuses
// (the SDK's support layer).
using support::Error;

[[noreturn]] void fail(int32_t code, const std::string& message);
// RUNTIME_ERROR (OUT_OF_MEMORY for allocation failures) naming the call and CUDA's error string.
void check_cuda(cudaError_t status, const char* what);
void check_cublas(cublasStatus_t status, const char* what);
void check_cudnn(cudnnStatus_t status, const char* what);

using Shape = std::vector<int64_t>;

int64_t element_count(const Shape& dims);
int64_t product(const Shape& dims, size_t begin, size_t end);  // of dims[begin, end)
std::string shape_string(const Shape& dims);
using support::element_size;  // bytes; 0 for strings and sub-byte types
inline const char* type_name(int32_t element_type) { return support::element_type_name(element_type); }
bool is_float_type(int32_t element_type);  // the types kernels compute in: float32, float16
DType dtype_of(int32_t element_type);      // throws for anything but float32 / float16
// Normalizes an axis in [-rank, rank) (or [-rank, rank] with `inclusive`); throws INVALID_ARGUMENT otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what, bool inclusive = false);

// A tensor while a partition runs: device memory (the instance's arena, the core's output or input buffers, or a
// compiled constant).  `hold` keeps arena memory alive; aliases (Reshape and friends) share it.
struct Tensor {
    int32_t type = TESS_ELEMENT_UNDEFINED;
    Shape dims;
    void* data = nullptr;
    std::shared_ptr<void> hold;

    int64_t count() const { return element_count(dims); }
    size_t bytes() const { return static_cast<size_t>(count()) * element_size(type); }
    int64_t rank() const { return static_cast<int64_t>(dims.size()); }
};

// Float values of a host constant (float32, float16 or float64) -- for parameters folded at compile time.
std::vector<float> constant_floats(const TessValue* value);
// Integer values of a host constant (int64 or int32).
std::vector<int64_t> constant_ints(const TessValue* value);
Shape value_dims(const TessValue* value);

// float <-> float16 on the host (round to nearest even).
inline uint16_t float_to_half_bits(float value) { return support::float_to_half(value); }
inline float half_bits_to_float(uint16_t bits) { return support::half_to_float(bits); }

}  // namespace tessera::cuda
