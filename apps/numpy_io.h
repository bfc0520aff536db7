// NumPy files for the `tessera` CLI: .npy tensors in and out, and the arrays of an .npz archive (np.savez, with or
// without compression; read through libzip).  Little-endian, C-ordered arrays of numeric or bool dtypes; what numpy
// cannot describe (bfloat16, float8, sub-byte types, strings) is written as a .pb file by the caller instead.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::numpy_io {

// One .npy file as a tensor.
Value load_npy(const std::string& path);
Value parse_npy(const std::string& bytes, const std::string& what);
// Writes a tensor as .npy; false (nothing written) when numpy has no dtype for its element type.
bool save_npy(const std::string& path, ValueView tensor);
bool has_npy_dtype(ElementType type);

// Every array of an .npz archive, by name (the member name without ".npy"), in archive order.
std::vector<std::pair<std::string, Value>> load_npz(const std::string& path);

}  // namespace tessera::numpy_io
