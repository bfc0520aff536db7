// The image provider's decoders (decoders.cc): encoded BMP, JPEG, JPEG 2000, PNG, PNM, TIFF and WebP streams to 8-bit
// RGB as Pillow, ImageDecoder's reference, decodes them, and the pixel formats ImageDecoder offers.  No dependency on
// Tessera beyond the C++ standard library and the codec libraries.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::image {

// 8-bit RGB, row-major (height, width, 3); 0 x 0 when the stream could not be decoded.
struct RgbImage {
    int64_t width = 0;
    int64_t height = 0;
    std::vector<uint8_t> pixels;

    uint8_t* row(int64_t y) { return pixels.data() + y * width * 3; }
};

enum class PixelFormat { RGB, BGR, Grayscale };

// ImageDecoder's pixel_format attribute; nothing for a name it does not define.
std::optional<PixelFormat> parse_pixel_format(std::string_view name);
inline int64_t channels_of(PixelFormat format) { return format == PixelFormat::Grayscale ? 1 : 3; }

// Decodes an untrusted stream: every read is bounds-checked and sizes are capped before allocating.  A stream that
// cannot be decoded (corrupt, truncated beyond repair, unknown format) gives the empty image, as the spec asks.
// Thread-safe.
RgbImage decode_rgb(std::span<const uint8_t> encoded);

// Writes `image` in `format` to dst, height * width * channels_of(format) bytes.
void convert_pixels(const RgbImage& image, PixelFormat format, uint8_t* dst);

}  // namespace tessera::image
