// The model `tessera run` uses when no MODEL is given, embedded into the executable at build time from
// models/default.onnx (apps/embed_file.cmake writes the generated source).  A build without that file embeds
// zero bytes, and `tessera run` then asks for a MODEL.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const unsigned char tessera_default_model[];
extern const size_t tessera_default_model_size;

#ifdef __cplusplus
}
#endif
