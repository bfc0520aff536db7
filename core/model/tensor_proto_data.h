// The data a TensorProto holds in itself (raw_data or its typed fields) decoded into the packed little-endian storage
// of Tessera tensors.  The one decoder of that encoding: the core's model loader and the consumer-side ONNX file
// library (onnx_io/) both compile this file, which depends only on the onnx protobuf classes and the public
// element-type table, and each turns a problem into its own error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <onnx/onnx_pb.h>

namespace tessera::tensor_proto_data {

// Copies the data of `proto`, a tensor of `count` elements of `type` taking `bytes` of storage, into `out` (`bytes`
// long).  Returns "" on success, else what is wrong (e.g. "float_data holds 3 entries, 4 expected").  Not for string
// tensors or external data.  Typed fields follow onnx: float, double, int64 and (u)int32 in their own fields, bool
// and the other 8- and 16-bit types' bit patterns in int32_data, the 4- and 2-bit types one packed byte per entry,
// and float6 (or any sub-byte type written one element per entry) one code per element.
std::string copy(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes, void* out);

// What copy() would find wrong with the amount of data, without copying: a reader checks this before it allocates,
// so that a small file declaring a huge tensor costs an error, not the declared memory.
std::string check(const onnx::TensorProto& proto, int32_t type, size_t count, size_t bytes);

}  // namespace tessera::tensor_proto_data
