// The image provider's pixel formats (decoders.h): ImageDecoder's pixel_format attribute and the conversion of 8-bit
// RGB to it, which the plugin itself runs (the codec libraries live in libtessera_image_codecs.so, codecs_entry.cc).
#include <algorithm>

#include "decoders.h"

namespace tessera::image {

std::optional<PixelFormat> parse_pixel_format(std::string_view name) {
    if (name == "RGB") return PixelFormat::RGB;
    if (name == "BGR") return PixelFormat::BGR;
    if (name == "Grayscale") return PixelFormat::Grayscale;
    return std::nullopt;
}

void convert_pixels(const RgbImage& image, PixelFormat format, uint8_t* dst) {
    const uint8_t* rgb = image.pixels.data();
    const int64_t pixels = image.width * image.height;
    switch (format) {
        case PixelFormat::RGB:
            std::copy_n(rgb, pixels * 3, dst);
            break;
        case PixelFormat::BGR:
            for (int64_t p = 0; p < pixels; ++p) {
                dst[3 * p] = rgb[3 * p + 2];
                dst[3 * p + 1] = rgb[3 * p + 1];
                dst[3 * p + 2] = rgb[3 * p];
            }
            break;
        case PixelFormat::Grayscale:
            // Pillow's convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded.
            for (int64_t p = 0; p < pixels; ++p) {
                const uint32_t luma = rgb[3 * p] * 19595u + rgb[3 * p + 1] * 38470u + rgb[3 * p + 2] * 7471u;
                dst[p] = static_cast<uint8_t>((luma + 0x8000u) >> 16);
            }
            break;
    }
}

}  // namespace tessera::image
