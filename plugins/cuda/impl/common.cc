// CUDA provider: errors, shapes and host-constant helpers (common.h).
#include "common.h"

#include <cstring>

namespace tessera::cuda {

namespace {
const TessHostApi* g_host = nullptr;
}

const TessHostApi& host() { return *g_host; }
void set_host(const TessHostApi* api) { g_host = api; }

void fail(int32_t code, const std::string& message) { throw Error(code, message); }

void check_cuda(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return;
    cudaGetLastError();  // clear a non-sticky error so that the next call does not see it
    const int32_t code = status == cudaErrorMemoryAllocation ? TESS_STATUS_OUT_OF_MEMORY : TESS_STATUS_RUNTIME_ERROR;
    fail(code, std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    const int32_t code = status == CUBLAS_STATUS_ALLOC_FAILED ? TESS_STATUS_OUT_OF_MEMORY : TESS_STATUS_RUNTIME_ERROR;
    fail(code, std::string("cuda: ") + what + ": " + cublasGetStatusName(status) + " (" +
                   cublasGetStatusString(status) + ")");
}

void check_cudnn(cudnnStatus_t status, const char* what) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    const int32_t code = status == CUDNN_STATUS_ALLOC_FAILED ? TESS_STATUS_OUT_OF_MEMORY : TESS_STATUS_RUNTIME_ERROR;
    char detail[512] = {};
    cudnnGetLastErrorString(detail, sizeof detail);
    std::string message = std::string("cuda: ") + what + ": " + cudnnGetErrorString(status);
    if (detail[0] != '\0') message += std::string(" (") + detail + ")";
    fail(code, message);
}

int64_t element_count(const Shape& dims) { return product(dims, 0, dims.size()); }

int64_t product(const Shape& dims, size_t begin, size_t end) {
    int64_t n = 1;
    for (size_t i = begin; i < end && i < dims.size(); ++i) n *= dims[i];
    return n;
}

std::string shape_string(const Shape& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

bool is_float_type(int32_t t) { return t == TESS_ELEMENT_FLOAT32 || t == TESS_ELEMENT_FLOAT16; }

DType dtype_of(int32_t t) {
    if (t == TESS_ELEMENT_FLOAT32) return DType::F32;
    if (t == TESS_ELEMENT_FLOAT16) return DType::F16;
    fail(TESS_STATUS_INVALID_ARGUMENT, std::string("cuda: element type ") + type_name(t) + " is not float or float16");
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what, bool inclusive) {
    const int64_t limit = inclusive ? rank + 1 : rank;
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= limit)
        fail(TESS_STATUS_INVALID_ARGUMENT,
             std::string("cuda: ") + what + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    return a;
}

Shape value_dims(const TessValue* value) {
    const size_t rank = host().tensor_rank(value);
    const int64_t* dims = host().tensor_dims(value);
    return Shape(dims, dims + rank);
}

std::vector<float> constant_floats(const TessValue* value) {
    const size_t n = host().tensor_element_count(value);
    const void* data = host().tensor_const_data(value);
    std::vector<float> out(n);
    switch (host().value_element_type(value)) {
        case TESS_ELEMENT_FLOAT32: std::memcpy(out.data(), data, n * sizeof(float)); break;
        case TESS_ELEMENT_FLOAT16: {
            const auto* p = static_cast<const uint16_t*>(data);
            for (size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(p[i]);
            break;
        }
        case TESS_ELEMENT_FLOAT64: {
            const auto* p = static_cast<const double*>(data);
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
            break;
        }
        default:
            fail(TESS_STATUS_INVALID_ARGUMENT, std::string("cuda: a constant of type ") +
                                                   type_name(host().value_element_type(value)) + " where float was expected");
    }
    return out;
}

std::vector<int64_t> constant_ints(const TessValue* value) {
    const size_t n = host().tensor_element_count(value);
    const void* data = host().tensor_const_data(value);
    std::vector<int64_t> out(n);
    switch (host().value_element_type(value)) {
        case TESS_ELEMENT_INT64: std::memcpy(out.data(), data, n * sizeof(int64_t)); break;
        case TESS_ELEMENT_INT32: {
            const auto* p = static_cast<const int32_t*>(data);
            for (size_t i = 0; i < n; ++i) out[i] = p[i];
            break;
        }
        default:
            fail(TESS_STATUS_INVALID_ARGUMENT, std::string("cuda: a constant of type ") +
                                                   type_name(host().value_element_type(value)) + " where int64 was expected");
    }
    return out;
}

}  // namespace tessera::cuda
