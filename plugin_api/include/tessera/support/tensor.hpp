/*
 * Tessera plugin support (header-only C++17, installed with the SDK): typed views of tensors.
 *
 * A TensorView reads a TessValue through the host table: its element type, shape and data, with data<T>() checking
 * that T is the tensor's element type.  It owns nothing: it is valid while the value is (for a compute input, the
 * compute call; for a compile-time constant, until the compiled object is released, provider.h).  Cheap to copy;
 * thread-safe as the value is.
 */
#ifndef TESSERA_SUPPORT_TENSOR_HPP_
#define TESSERA_SUPPORT_TENSOR_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/provider.h"
#include "tessera/support/element_types.hpp"
#include "tessera/support/float16.hpp"
#include "tessera/support/status.hpp"

namespace tessera::support {

/* The TessElementType of a C++ element type (a compile error for types without one). */
template <typename T> struct ElementTypeOf;
template <> struct ElementTypeOf<float> { static constexpr int32_t value = TESS_ELEMENT_FLOAT32; };
template <> struct ElementTypeOf<double> { static constexpr int32_t value = TESS_ELEMENT_FLOAT64; };
template <> struct ElementTypeOf<Half> { static constexpr int32_t value = TESS_ELEMENT_FLOAT16; };
template <> struct ElementTypeOf<BFloat16> { static constexpr int32_t value = TESS_ELEMENT_BFLOAT16; };
template <> struct ElementTypeOf<int8_t> { static constexpr int32_t value = TESS_ELEMENT_INT8; };
template <> struct ElementTypeOf<uint8_t> { static constexpr int32_t value = TESS_ELEMENT_UINT8; };
template <> struct ElementTypeOf<int16_t> { static constexpr int32_t value = TESS_ELEMENT_INT16; };
template <> struct ElementTypeOf<uint16_t> { static constexpr int32_t value = TESS_ELEMENT_UINT16; };
template <> struct ElementTypeOf<int32_t> { static constexpr int32_t value = TESS_ELEMENT_INT32; };
template <> struct ElementTypeOf<uint32_t> { static constexpr int32_t value = TESS_ELEMENT_UINT32; };
template <> struct ElementTypeOf<int64_t> { static constexpr int32_t value = TESS_ELEMENT_INT64; };
template <> struct ElementTypeOf<uint64_t> { static constexpr int32_t value = TESS_ELEMENT_UINT64; };
template <> struct ElementTypeOf<bool> { static constexpr int32_t value = TESS_ELEMENT_BOOL; };
template <typename T> inline constexpr int32_t element_type_of = ElementTypeOf<T>::value;

class TensorView {
public:
    /* `value` must be a tensor (TESS_VALUE_TENSOR); throws Error(INVALID_ARGUMENT) otherwise, and for NULL. */
    TensorView(const TessHostApi* host, const TessValue* value) : host_(host), value_(value) {
        if (value == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "a tensor was expected, got no value");
        if (host->value_kind(value) != TESS_VALUE_TENSOR)
            fail(TESS_STATUS_INVALID_ARGUMENT, "a tensor was expected, got a sequence, optional or map");
    }

    int32_t element_type() const { return host_->value_element_type(value_); }
    size_t rank() const { return host_->tensor_rank(value_); }
    const int64_t* dims() const { return host_->tensor_dims(value_); }
    int64_t dim(size_t axis) const { return dims()[axis]; }
    std::vector<int64_t> shape() const { return std::vector<int64_t>(dims(), dims() + rank()); }
    size_t element_count() const { return host_->tensor_element_count(value_); }
    size_t byte_size() const { return host_->tensor_byte_size(value_); }
    std::string describe() const {
        return std::string(element_type_name(element_type())) + " " + shape_string(dims(), rank());
    }
    const TessValue* value() const { return value_; }

    /* The elements, typed; throws Error(INVALID_ARGUMENT) when T is not the tensor's element type. */
    template <typename T> const T* data() const {
        expect_type(element_type_of<T>);
        return static_cast<const T*>(host_->tensor_const_data(value_));
    }
    /* Writable elements of a tensor this code owns (an output it allocated); same check. */
    template <typename T> T* mutable_data() const {
        expect_type(element_type_of<T>);
        return static_cast<T*>(host_->tensor_data(const_cast<TessValue*>(value_)));
    }
    const void* raw_data() const { return host_->tensor_const_data(value_); }

private:
    void expect_type(int32_t type) const {
        if (element_type() != type)
            fail(TESS_STATUS_INVALID_ARGUMENT,
                 std::string("a tensor of ") + element_type_name(type) + " was expected, got " + describe());
    }

    const TessHostApi* host_;
    const TessValue* value_;
};

}  // namespace tessera::support

#endif  // TESSERA_SUPPORT_TENSOR_HPP_
