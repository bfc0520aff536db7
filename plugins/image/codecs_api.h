// The boundary between the image plugin (plugin.cc) and libtessera_image_codecs.so (codecs_entry.cc), which it opens
// with dlopen from its image/ folder: C functions only, both built from this tree (no versioning beyond the names).
#pragma once

#include <stddef.h>
#include <stdint.h>

#define TESS_IMAGE_CODECS_FILE "libtessera_image_codecs.so"

extern "C" {
// Decodes `size` bytes of an encoded image (decoders.h decode_rgb) to 8-bit RGB, height x width x 3 bytes, returned
// in a buffer the caller gives back with tess_image_codecs_free.  An undecodable stream gives NULL with width and
// height 0 (the spec's empty image); NULL with -1 means the decoder failed (out of memory).  Thread-safe.
uint8_t* tess_image_codecs_decode_rgb(const uint8_t* data, size_t size, int64_t* width, int64_t* height) noexcept;
void tess_image_codecs_free(uint8_t* pixels) noexcept;
}
using TessImageDecodeFn = decltype(&tess_image_codecs_decode_rgb);
using TessImageFreeFn = decltype(&tess_image_codecs_free);
