// libtessera_image_codecs.so: the image provider's decoders and the codec libraries they wrap (libjpeg, libpng,
// libtiff, libwebp, libopenjp2), in the image/ folder next to the plugin, which opens it the first time it decodes
// (plugin.cc): a process that never decodes an image never loads them (about 1 ms of every first session creation,
// and their pages).  Two C functions cross the boundary; see codecs_api.h.
#include <cstdlib>
#include <cstring>

#include "codecs_api.h"
#include "decoders.h"

extern "C" __attribute__((visibility("default"))) uint8_t* tess_image_codecs_decode_rgb(const uint8_t* data,
                                                                                         size_t size, int64_t* width,
                                                                                         int64_t* height) noexcept {
    *width = *height = -1;
    try {
        const tessera::image::RgbImage image = tessera::image::decode_rgb({data, size});
        *width = image.width;
        *height = image.height;
        if (image.pixels.empty()) return nullptr;
        auto* pixels = static_cast<uint8_t*>(std::malloc(image.pixels.size()));
        if (pixels == nullptr) {
            *width = *height = -1;
            return nullptr;
        }
        std::memcpy(pixels, image.pixels.data(), image.pixels.size());
        return pixels;
    } catch (...) {  // out of memory: nothing may cross the boundary
        *width = *height = -1;
        return nullptr;
    }
}

extern "C" __attribute__((visibility("default"))) void tess_image_codecs_free(uint8_t* pixels) noexcept {
    std::free(pixels);
}
