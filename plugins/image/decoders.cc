// ImageDecoder (opset 20): decodes one encoded image (BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) into an 8-bit
// (H, W, 3) RGB or BGR tensor, or an (H, W, 1) grayscale one.  The reference implementation is Pillow, so the
// decoders reproduce what Pillow's Image.open + np.array / convert("L") give: the JPEG, PNG, TIFF, WebP and
// JPEG 2000 codecs are the system libraries Pillow itself wraps (with Pillow's settings); BMP and PNM are parsed
// here.  The encoded bytes are untrusted: every read is bounds-checked, the libraries report failures through
// their own error channels, and image sizes are capped before anything is allocated.
//
// Every decoder produces 8-bit RGB; the requested pixel format is derived from it.  The spec says an image that
// cannot be decoded (corrupt stream, unknown format) yields an empty matrix, so decoding failures give an empty
// image.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "decoders.h"

namespace tessera::image {
namespace {

using Bytes = std::span<const uint8_t>;

// A decoding failure: turned into the spec's empty output, never seen outside this file.
struct DecodeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& what) { throw DecodeError(what); }

// Larger images are refused before any allocation, so a few header bytes cannot claim gigabytes.
constexpr int64_t kMaxPixels = int64_t{1} << 28;

void check_dimensions(int64_t width, int64_t height, const char* format) {
    if (width <= 0 || height <= 0) fail(std::string(format) + ": image has no pixels");
    if (width > kMaxPixels / height) fail(std::string(format) + ": image too large");
}

RgbImage allocate_rgb(int64_t width, int64_t height, const char* format) {
    check_dimensions(width, height, format);
    RgbImage image;
    image.width = width;
    image.height = height;
    image.pixels.resize(static_cast<size_t>(width * height * 3));
    return image;
}

bool starts_with(Bytes data, std::initializer_list<uint8_t> magic) {
    return data.size() >= magic.size() && std::equal(magic.begin(), magic.end(), data.begin());
}

// ---- BMP ------------------------------------------------------------------------------------------------------

uint32_t read_le(Bytes data, size_t offset, size_t count) {
    if (offset > data.size() || data.size() - offset < count) fail("BMP: truncated header");
    uint32_t value = 0;
    for (size_t i = 0; i < count; ++i) value |= uint32_t{data[offset + i]} << (8 * i);
    return value;
}

// One colour channel described by a bit mask, scaled to 8 bits the way Pillow unpacks BGR;15/BGR;16 (v * 255 /
// max) and wider channels (top 8 bits).
struct MaskChannel {
    int shift = 0;
    int bits = 0;

    static MaskChannel from(uint32_t mask) {
        MaskChannel c;
        if (mask == 0) return c;
        c.shift = std::countr_zero(mask);
        c.bits = std::popcount(mask);
        if ((mask >> c.shift) != (c.bits == 32 ? ~uint32_t{0} : (uint32_t{1} << c.bits) - 1))
            fail("BMP: non-contiguous bit field mask");
        return c;
    }
    uint8_t operator()(uint32_t pixel) const {
        if (bits == 0) return 0;
        const uint32_t v = (pixel >> shift) & (bits == 32 ? ~uint32_t{0} : (uint32_t{1} << bits) - 1);
        if (bits >= 8) return static_cast<uint8_t>(v >> (bits - 8));
        return static_cast<uint8_t>(v * 255 / ((uint32_t{1} << bits) - 1));
    }
};

using Palette = std::array<std::array<uint8_t, 3>, 256>;

// RLE8/RLE4 pixel indices in stored (bottom-up) row order; pixels the stream skips keep index 0.
std::vector<uint8_t> decode_bmp_rle(Bytes data, size_t at, int64_t width, int64_t height, bool rle4) {
    std::vector<uint8_t> indices(static_cast<size_t>(width * height), 0);
    int64_t x = 0;
    int64_t y = 0;
    const auto put = [&](uint8_t index) {
        if (x < width && y < height) indices[static_cast<size_t>(y * width + x)] = index;
        ++x;
    };
    const auto next = [&]() -> uint8_t {
        if (at >= data.size()) fail("BMP: truncated RLE data");
        return data[at++];
    };
    while (y < height) {
        if (at >= data.size()) {
            if (y == height - 1 && x >= width) break;  // all pixels written, end-of-bitmap marker missing
            fail("BMP: truncated RLE data");
        }
        const uint8_t count = next();
        const uint8_t value = next();
        if (count > 0) {
            for (int i = 0; i < count; ++i) put(rle4 ? (i % 2 == 0 ? value >> 4 : value & 0x0F) : value);
        } else if (value == 0) {  // end of line
            x = 0;
            ++y;
        } else if (value == 1) {  // end of bitmap
            break;
        } else if (value == 2) {  // delta
            x += next();
            y += next();
        } else {  // absolute run of `value` pixels, padded to a 16-bit boundary
            const size_t byte_count = rle4 ? (size_t{value} + 1) / 2 : value;
            if (data.size() - at < byte_count) fail("BMP: truncated RLE data");
            for (int i = 0; i < value; ++i) {
                const uint8_t byte = data[at + (rle4 ? i / 2 : i)];
                put(rle4 ? (i % 2 == 0 ? byte >> 4 : byte & 0x0F) : byte);
            }
            at += byte_count + (byte_count % 2);
        }
    }
    return indices;
}

RgbImage decode_bmp(Bytes data) {
    constexpr uint32_t kRaw = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3, kAlphaBitfields = 6;
    size_t pixel_offset = read_le(data, 10, 4);
    const uint32_t header_size = read_le(data, 14, 4);
    int64_t width = 0;
    int64_t height = 0;
    bool top_down = false;
    uint32_t bits = 0;
    uint32_t compression = kRaw;
    uint32_t colors = 0;
    size_t palette_entry = 4;
    size_t palette_at = 14 + size_t{header_size};
    std::array<uint32_t, 3> masks{};
    if (header_size == 12) {  // BITMAPCOREHEADER: 16-bit dimensions, 3-byte palette entries
        width = read_le(data, 18, 2);
        height = read_le(data, 20, 2);
        bits = read_le(data, 24, 2);
        palette_entry = 3;
    } else if (header_size == 40 || header_size == 52 || header_size == 56 || header_size == 64 ||
               header_size == 108 || header_size == 124) {
        width = static_cast<int32_t>(read_le(data, 18, 4));
        const int32_t stored_height = static_cast<int32_t>(read_le(data, 22, 4));
        top_down = stored_height < 0;
        height = top_down ? -int64_t{stored_height} : stored_height;
        bits = read_le(data, 28, 2);
        compression = read_le(data, 30, 4);
        colors = read_le(data, 46, 4);
        if (compression == kBitfields || compression == kAlphaBitfields) {
            // The masks follow a 40-byte header and are part of the longer ones.
            for (size_t i = 0; i < 3; ++i) masks[i] = read_le(data, 54 + 4 * i, 4);
            if (header_size == 40) palette_at += compression == kAlphaBitfields ? 16 : 12;
        }
    } else {
        fail("BMP: unsupported header size " + std::to_string(header_size));
    }
    check_dimensions(width, height, "BMP");

    Palette palette{};
    if (bits <= 8) {
        if (bits != 1 && bits != 4 && bits != 8) fail("BMP: unsupported bit depth " + std::to_string(bits));
        const uint32_t count = colors != 0 ? colors : 1u << bits;
        if (count > 65536) fail("BMP: invalid palette size");
        for (uint32_t i = 0; i < std::min<uint32_t>(count, 256); ++i) {
            const size_t at = palette_at + i * palette_entry;
            palette[i] = {uint8_t(read_le(data, at + 2, 1)), uint8_t(read_le(data, at + 1, 1)),
                          uint8_t(read_le(data, at, 1))};
        }
        // Some writers point the pixel offset at the palette; Pillow skips the palette in that case.
        if (pixel_offset == 14 + size_t{header_size}) pixel_offset += 4 * size_t{count};
    }

    if (compression == kRle8 || compression == kRle4) {
        if (bits != (compression == kRle8 ? 8u : 4u)) fail("BMP: RLE compression with wrong bit depth");
        const std::vector<uint8_t> indices = decode_bmp_rle(data, pixel_offset, width, height, compression == kRle4);
        RgbImage image = allocate_rgb(width, height, "BMP");
        for (int64_t y = 0; y < height; ++y) {
            const uint8_t* in = indices.data() + (top_down ? y : height - 1 - y) * width;
            uint8_t* out = image.row(y);
            for (int64_t x = 0; x < width; ++x) std::copy_n(palette[in[x]].data(), 3, out + 3 * x);
        }
        return image;
    }
    if (compression != kRaw && compression != kBitfields && compression != kAlphaBitfields)
        fail("BMP: unsupported compression " + std::to_string(compression));
    if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32)
        fail("BMP: unsupported bit depth " + std::to_string(bits));
    if (compression != kRaw && bits <= 8) fail("BMP: bit fields on a palette image");
    if (compression == kRaw || (masks[0] | masks[1] | masks[2]) == 0) {
        masks = bits == 16 ? std::array<uint32_t, 3>{0x7C00, 0x03E0, 0x001F}
                           : std::array<uint32_t, 3>{0xFF0000, 0x00FF00, 0x0000FF};
    }
    const MaskChannel red = MaskChannel::from(masks[0]), green = MaskChannel::from(masks[1]),
                      blue = MaskChannel::from(masks[2]);

    // Rows are padded to 4 bytes; the last row's padding may be missing.
    const int64_t stride = (width * bits + 31) / 32 * 4;
    const int64_t last_row_bytes = (width * bits + 7) / 8;
    if (pixel_offset > data.size() ||
        static_cast<int64_t>(data.size() - pixel_offset) < (height - 1) * stride + last_row_bytes)
        fail("BMP: truncated pixel data");
    RgbImage image = allocate_rgb(width, height, "BMP");
    const size_t bytes_per_pixel = bits / 8;
    for (int64_t y = 0; y < height; ++y) {
        const uint8_t* in = data.data() + pixel_offset + (top_down ? y : height - 1 - y) * stride;
        uint8_t* out = image.row(y);
        for (int64_t x = 0; x < width; ++x, out += 3) {
            if (bits <= 8) {
                const int64_t bit = x * bits;
                const int index = (in[bit / 8] >> (8 - bits - bit % 8)) & ((1 << bits) - 1);
                std::copy_n(palette[static_cast<size_t>(index)].data(), 3, out);
            } else {
                uint32_t pixel = 0;
                for (size_t b = 0; b < bytes_per_pixel; ++b) pixel |= uint32_t{in[x * bytes_per_pixel + b]} << (8 * b);
                out[0] = red(pixel);
                out[1] = green(pixel);
                out[2] = blue(pixel);
            }
        }
    }
    return image;
}

// ---- PNM (PBM/PGM/PPM, plain and raw) ---------------------------------------------------------------------------

class PnmReader {
public:
    explicit PnmReader(Bytes data) : data_(data), at_(2) {}

    // Whitespace and '#' comments between header fields and plain-format samples.
    void skip_separators() {
        while (at_ < data_.size()) {
            if (is_space(data_[at_])) {
                ++at_;
            } else if (data_[at_] == '#') {
                while (at_ < data_.size() && data_[at_] != '\n' && data_[at_] != '\r') ++at_;
            } else {
                break;
            }
        }
    }
    uint32_t number(uint32_t max_value) {
        skip_separators();
        if (at_ >= data_.size() || data_[at_] < '0' || data_[at_] > '9') fail("PNM: expected a number");
        uint64_t value = 0;
        while (at_ < data_.size() && data_[at_] >= '0' && data_[at_] <= '9') {
            value = value * 10 + (data_[at_++] - '0');
            if (value > max_value) fail("PNM: number out of range");
        }
        return static_cast<uint32_t>(value);
    }
    // A plain PBM sample: one '0' or '1', separators optional.
    uint32_t bit() {
        skip_separators();
        if (at_ >= data_.size() || (data_[at_] != '0' && data_[at_] != '1')) fail("PNM: expected a bit");
        return data_[at_++] - '0';
    }
    // The single whitespace byte that ends a raw header.
    void end_header() {
        if (at_ >= data_.size() || !is_space(data_[at_])) fail("PNM: malformed header");
        ++at_;
    }
    size_t remaining() const { return data_.size() - at_; }
    Bytes raster(size_t count) {
        if (data_.size() - at_ < count) fail("PNM: truncated pixel data");
        return data_.subspan(at_, count);
    }

private:
    static bool is_space(uint8_t c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    }

    Bytes data_;
    size_t at_;
};

RgbImage decode_pnm(Bytes data) {
    const int kind = data[1] - '0';  // P1..P6, checked by the caller
    const bool bitmap = kind == 1 || kind == 4;
    const bool plain = kind <= 3;
    const int channels = (kind == 3 || kind == 6) ? 3 : 1;
    PnmReader reader(data);
    const int64_t width = reader.number(INT32_MAX);
    const int64_t height = reader.number(INT32_MAX);
    const uint32_t maxval = bitmap ? 1 : reader.number(65535);
    if (maxval == 0) fail("PNM: maxval is 0");
    if (!plain) reader.end_header();
    check_dimensions(width, height, "PNM");
    const int64_t samples = width * height * channels;
    const int64_t row_bytes = (width + 7) / 8;  // raw PBM
    const size_t sample_bytes = maxval > 255 ? 2 : 1;
    // Every plain sample takes at least one byte: the raster must be there before the image is allocated.
    const size_t needed = plain    ? size_t(samples)
                          : bitmap ? size_t(row_bytes * height)
                                   : size_t(samples) * sample_bytes;
    if (reader.remaining() < needed) fail("PNM: truncated pixel data");
    RgbImage image = allocate_rgb(width, height, "PNM");

    // Samples scale to 8 bits as Pillow does: round(v / maxval * 255), ties to even; values above maxval clip.
    std::vector<uint8_t> scale(maxval + 1);
    for (uint32_t v = 0; v <= maxval; ++v)
        scale[v] = bitmap ? (v ? 0 : 255) : static_cast<uint8_t>(std::nearbyint(double(v) / maxval * 255.0));
    const auto store = [&](int64_t sample, uint32_t v) {
        const uint8_t value = scale[std::min(v, maxval)];
        if (channels == 3) {
            image.pixels[size_t(sample)] = value;
        } else {
            std::fill_n(image.pixels.data() + 3 * sample, 3, value);
        }
    };
    if (plain) {
        for (int64_t i = 0; i < samples; ++i) store(i, bitmap ? reader.bit() : reader.number(UINT32_MAX));
    } else if (bitmap) {
        Bytes raster = reader.raster(needed);
        for (int64_t y = 0; y < height; ++y)
            for (int64_t x = 0; x < width; ++x)
                store(y * width + x, (raster[size_t(y * row_bytes + x / 8)] >> (7 - x % 8)) & 1);
    } else {
        Bytes raster = reader.raster(needed);
        for (int64_t i = 0; i < samples; ++i) {
            const size_t at = size_t(i) * sample_bytes;
            store(i, sample_bytes == 2 ? uint32_t{raster[at]} << 8 | raster[at + 1] : raster[at]);
        }
    }
    return image;
}

// ---- JPEG (libjpeg-turbo) ---------------------------------------------------------------------------------------

// libjpeg reports fatal errors through error_exit, which must not return: it longjmps back into JpegReader::read.
struct JpegErrors {
    jpeg_error_mgr manager;
    std::jmp_buf jump;
    bool truncated;
};

void jpeg_error_exit(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<JpegErrors*>(cinfo->err)->jump, 1); }

// Warnings are ignored as Pillow ignores them, except running out of data: libjpeg would pad the image with gray.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegErrors*>(cinfo->err)->truncated = true;
}

void jpeg_output_message(j_common_ptr) {}

// Pillow's CMYK to RGB (JPEG CMYK is stored inverted, Adobe style).
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t width) {
    const auto muldiv255 = [](int a, int b) {
        const int t = a * b + 128;
        return ((t >> 8) + t) >> 8;
    };
    for (int64_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
        const int nk = cmyk[3];  // 255 - k after the inversion
        for (int c = 0; c < 3; ++c)
            rgb[c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - cmyk[c], nk), 0, 255));
    }
}

class JpegReader {
public:
    JpegReader() {
        cinfo_.err = jpeg_std_error(&errors_.manager);
        errors_.manager.error_exit = jpeg_error_exit;
        errors_.manager.emit_message = jpeg_emit_message;
        errors_.manager.output_message = jpeg_output_message;
    }
    ~JpegReader() {
        if (created_) jpeg_destroy_decompress(&cinfo_);
    }
    JpegReader(const JpegReader&) = delete;
    JpegReader& operator=(const JpegReader&) = delete;

    // False on a libjpeg error.  Only trivially destructible locals live here, so the longjmp skips no destructor.
    bool read(Bytes data, RgbImage& image) {
        if (setjmp(errors_.jump)) return false;
        created_ = true;  // the struct is zeroed, so destroying a half-created one is safe
        jpeg_create_decompress(&cinfo_);
        jpeg_mem_src(&cinfo_, data.data(), static_cast<unsigned long>(data.size()));
        if (jpeg_read_header(&cinfo_, TRUE) != JPEG_HEADER_OK) return false;
        const bool cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
        cinfo_.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
        // Pillow decodes with libjpeg's defaults (it only changes them in draft mode): accurate integer IDCT and
        // fancy (triangle-filter) chroma upsampling, which the spec also prescribes.
        cinfo_.dct_method = JDCT_ISLOW;
        cinfo_.do_fancy_upsampling = TRUE;
        image = allocate_rgb(cinfo_.image_width, cinfo_.image_height, "JPEG");  // before libjpeg's own buffers
        jpeg_start_decompress(&cinfo_);
        if (cinfo_.output_width != image.width || cinfo_.output_height != image.height ||
            cinfo_.output_components != (cmyk ? 4 : 3))
            return false;
        if (cmyk) cmyk_row_.resize(static_cast<size_t>(image.width) * 4);
        while (cinfo_.output_scanline < cinfo_.output_height) {
            const int64_t y = cinfo_.output_scanline;
            JSAMPROW row = cmyk ? cmyk_row_.data() : image.row(y);
            if (jpeg_read_scanlines(&cinfo_, &row, 1) != 1 || errors_.truncated) return false;
            if (cmyk) cmyk_to_rgb(cmyk_row_.data(), image.row(y), image.width);
        }
        return !errors_.truncated;
    }

private:
    jpeg_decompress_struct cinfo_{};
    JpegErrors errors_{};
    bool created_ = false;
    std::vector<uint8_t> cmyk_row_;
};

RgbImage decode_jpeg(Bytes data) {
    RgbImage image;
    JpegReader reader;
    if (!reader.read(data, image)) fail("JPEG: corrupt or truncated stream");
    return image;
}

// ---- PNG (libpng) -----------------------------------------------------------------------------------------------

struct MemoryCursor {
    Bytes data;
    size_t at = 0;
};

void png_read_memory(png_structp png, png_bytep out, size_t count) {
    auto* cursor = static_cast<MemoryCursor*>(png_get_io_ptr(png));
    if (cursor->data.size() - cursor->at < count) png_error(png, "truncated");
    std::memcpy(out, cursor->data.data() + cursor->at, count);
    cursor->at += count;
}

// libpng's error callback must not return; png_longjmp goes back to the setjmp in PngReader::read.
void png_fail(png_structp png, png_const_charp) { png_longjmp(png, 1); }
void png_warning_ignored(png_structp, png_const_charp) {}

class PngReader {
public:
    PngReader() {
        png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, png_fail, png_warning_ignored);
        if (png_ != nullptr) info_ = png_create_info_struct(png_);
    }
    ~PngReader() { png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr); }
    PngReader(const PngReader&) = delete;
    PngReader& operator=(const PngReader&) = delete;

    // False on a libpng error; as for JPEG, nothing with a destructor lives in this frame.
    bool read(MemoryCursor& cursor, RgbImage& image) {
        if (png_ == nullptr || info_ == nullptr) return false;
        if (setjmp(png_jmpbuf(png_))) return false;
        png_set_read_fn(png_, &cursor, png_read_memory);
        png_read_info(png_, info_);
        const int color_type = png_get_color_type(png_, info_);
        // Everything becomes 8-bit RGB the way Pillow's convert("RGB") sees it: palettes and low bit depths
        // expanded, 16-bit samples truncated to their high byte (Pillow's RGB;16B), alpha and tRNS dropped, and
        // no gamma correction.
        if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
        if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
            png_set_expand_gray_1_2_4_to_8(png_);
            png_set_gray_to_rgb(png_);
        }
        png_set_strip_16(png_);
        png_set_strip_alpha(png_);
        png_set_interlace_handling(png_);
        png_read_update_info(png_, info_);
        image = allocate_rgb(png_get_image_width(png_, info_), png_get_image_height(png_, info_), "PNG");
        if (png_get_channels(png_, info_) != 3 || png_get_bit_depth(png_, info_) != 8 ||
            png_get_rowbytes(png_, info_) != static_cast<size_t>(image.width) * 3)
            return false;
        rows_.resize(static_cast<size_t>(image.height));
        for (int64_t y = 0; y < image.height; ++y) rows_[size_t(y)] = image.row(y);
        png_read_image(png_, rows_.data());
        return true;
    }

private:
    png_structp png_ = nullptr;
    png_infop info_ = nullptr;
    std::vector<png_bytep> rows_;
};

RgbImage decode_png(Bytes data) {
    RgbImage image;
    MemoryCursor cursor{data};
    PngReader reader;
    if (!reader.read(cursor, image)) fail("PNG: corrupt or truncated stream");
    return image;
}

// ---- TIFF (libtiff) ---------------------------------------------------------------------------------------------

tmsize_t tiff_read(thandle_t handle, void* out, tmsize_t count) {
    auto* cursor = static_cast<MemoryCursor*>(handle);
    const size_t n = std::min(static_cast<size_t>(std::max<tmsize_t>(count, 0)), cursor->data.size() - cursor->at);
    std::memcpy(out, cursor->data.data() + cursor->at, n);
    cursor->at += n;
    return static_cast<tmsize_t>(n);
}
tmsize_t tiff_write(thandle_t, void*, tmsize_t) { return -1; }
toff_t tiff_seek(thandle_t handle, toff_t offset, int whence) {
    auto* cursor = static_cast<MemoryCursor*>(handle);
    const uint64_t base = whence == SEEK_CUR ? cursor->at : whence == SEEK_END ? cursor->data.size() : 0;
    // Unsigned arithmetic also serves a negative SEEK_CUR offset; one before the start wraps to a huge value.
    const uint64_t target = base + offset;
    if (target > cursor->data.size()) return static_cast<toff_t>(-1);
    cursor->at = static_cast<size_t>(target);
    return target;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t handle) { return static_cast<MemoryCursor*>(handle)->data.size(); }
int tiff_map(thandle_t, void**, toff_t*) { return 0; }
void tiff_unmap(thandle_t, void*, toff_t) {}
int tiff_quiet(TIFF*, void*, const char*, const char*, va_list) { return 1; }  // 1: handled, nothing printed

struct TiffCloser {
    void operator()(TIFF* tif) const { TIFFClose(tif); }
};
struct TiffOptionsFree {
    void operator()(TIFFOpenOptions* options) const { TIFFOpenOptionsFree(options); }
};

// Contiguous 8-bit RGB(A) strips are copied as stored, like Pillow's own TIFF reader: libtiff's RGBA interface
// would premultiply an unassociated alpha channel into the colours.
bool read_tiff_rgb_strips(TIFF* tif, RgbImage& image) {
    uint16_t photometric = 0, bits = 0, samples = 0, planar = PLANARCONFIG_CONTIG;
    TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
    if (photometric != PHOTOMETRIC_RGB || bits != 8 || (samples != 3 && samples != 4) ||
        planar != PLANARCONFIG_CONTIG || TIFFIsTiled(tif))
        return false;
    uint32_t rows_per_strip = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
    rows_per_strip = std::clamp<uint32_t>(rows_per_strip, 1, static_cast<uint32_t>(image.height));
    const int64_t row_bytes = image.width * samples;
    std::vector<uint8_t> strip(static_cast<size_t>(row_bytes * rows_per_strip));
    for (int64_t y0 = 0; y0 < image.height; y0 += rows_per_strip) {
        const int64_t rows = std::min<int64_t>(rows_per_strip, image.height - y0);
        const uint32_t index = TIFFComputeStrip(tif, static_cast<uint32_t>(y0), 0);
        const tmsize_t got = TIFFReadEncodedStrip(tif, index, strip.data(), static_cast<tmsize_t>(row_bytes * rows));
        if (got < row_bytes * rows) fail("TIFF: corrupt or truncated strip");
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* in = strip.data() + r * row_bytes;
            uint8_t* out = image.row(y0 + r);
            for (int64_t x = 0; x < image.width; ++x) std::copy_n(in + x * samples, 3, out + 3 * x);
        }
    }
    return true;
}

RgbImage decode_tiff(Bytes data) {
    MemoryCursor cursor{data};
    std::unique_ptr<TIFFOpenOptions, TiffOptionsFree> options(TIFFOpenOptionsAlloc());
    if (!options) fail("TIFF: out of memory");
    TIFFOpenOptionsSetErrorHandlerExtR(options.get(), tiff_quiet, nullptr);
    TIFFOpenOptionsSetWarningHandlerExtR(options.get(), tiff_quiet, nullptr);
    TIFFOpenOptionsSetMaxSingleMemAlloc(options.get(), tmsize_t{1} << 31);
    std::unique_ptr<TIFF, TiffCloser> tif(TIFFClientOpenExt("ImageDecoder", "rm", &cursor, tiff_read, tiff_write,
                                                            tiff_seek, tiff_close, tiff_size, tiff_map, tiff_unmap,
                                                            options.get()));
    if (!tif) fail("TIFF: invalid header");
    uint32_t width = 0, height = 0;
    if (!TIFFGetField(tif.get(), TIFFTAG_IMAGEWIDTH, &width) || !TIFFGetField(tif.get(), TIFFTAG_IMAGELENGTH, &height))
        fail("TIFF: missing dimensions");
    RgbImage image = allocate_rgb(width, height, "TIFF");
    if (read_tiff_rgb_strips(tif.get(), image)) return image;

    char message[1024];
    if (!TIFFRGBAImageOK(tif.get(), message)) fail(std::string("TIFF: ") + message);
    // Pillow ignores the Orientation tag; asking libtiff for the file's own orientation keeps the stored order
    // (libtiff treats the transposed orientations 5-8 like 1-4).
    uint16_t orientation = ORIENTATION_TOPLEFT;
    TIFFGetFieldDefaulted(tif.get(), TIFFTAG_ORIENTATION, &orientation);
    if (orientation >= 5 && orientation <= 8) orientation = static_cast<uint16_t>(orientation - 4);
    if (orientation < 1 || orientation > 4) orientation = ORIENTATION_TOPLEFT;
    std::vector<uint32_t> raster(static_cast<size_t>(image.width * image.height));
    if (!TIFFReadRGBAImageOriented(tif.get(), width, height, raster.data(), orientation, 1))
        fail("TIFF: corrupt or unsupported image data");
    for (size_t p = 0; p < raster.size(); ++p) {
        image.pixels[3 * p] = static_cast<uint8_t>(TIFFGetR(raster[p]));
        image.pixels[3 * p + 1] = static_cast<uint8_t>(TIFFGetG(raster[p]));
        image.pixels[3 * p + 2] = static_cast<uint8_t>(TIFFGetB(raster[p]));
    }
    return image;
}

// ---- WebP (libwebp) ---------------------------------------------------------------------------------------------

RgbImage decode_webp(Bytes data) {
    WebPBitstreamFeatures features;
    if (WebPGetFeatures(data.data(), data.size(), &features) != VP8_STATUS_OK) fail("WebP: invalid header");
    if (features.has_animation) fail("WebP: animated images are not supported");
    RgbImage image = allocate_rgb(features.width, features.height, "WebP");
    // libwebp's default (fancy) upsampling, as Pillow uses.
    if (WebPDecodeRGBInto(data.data(), data.size(), image.pixels.data(), image.pixels.size(),
                          static_cast<int>(image.width * 3)) == nullptr)
        fail("WebP: corrupt or truncated stream");
    return image;
}

// ---- JPEG 2000 (OpenJPEG) ---------------------------------------------------------------------------------------

OPJ_SIZE_T opj_read_memory(void* out, OPJ_SIZE_T count, void* user) {
    auto* cursor = static_cast<MemoryCursor*>(user);
    const size_t n = std::min<size_t>(count, cursor->data.size() - cursor->at);
    if (n == 0) return static_cast<OPJ_SIZE_T>(-1);  // end of stream
    std::memcpy(out, cursor->data.data() + cursor->at, n);
    cursor->at += n;
    return n;
}
OPJ_OFF_T opj_skip_memory(OPJ_OFF_T count, void* user) {
    auto* cursor = static_cast<MemoryCursor*>(user);
    if (count < 0) return -1;
    const size_t n = std::min<uint64_t>(static_cast<uint64_t>(count), cursor->data.size() - cursor->at);
    cursor->at += n;
    return static_cast<OPJ_OFF_T>(n);
}
OPJ_BOOL opj_seek_memory(OPJ_OFF_T offset, void* user) {
    auto* cursor = static_cast<MemoryCursor*>(user);
    if (offset < 0 || static_cast<uint64_t>(offset) > cursor->data.size()) return OPJ_FALSE;
    cursor->at = static_cast<size_t>(offset);
    return OPJ_TRUE;
}
void opj_quiet(const char*, void*) {}

struct OpjStreamFree {
    void operator()(opj_stream_t* s) const { opj_stream_destroy(s); }
};
struct OpjCodecFree {
    void operator()(opj_codec_t* c) const { opj_destroy_codec(c); }
};
struct OpjImageFree {
    void operator()(opj_image_t* i) const { opj_image_destroy(i); }
};

// A component sample as 8 bits, the way Pillow unpacks JPEG 2000 data: signed samples offset to unsigned, then
// shifted from the component's precision to 8 bits.
uint8_t j2k_sample(const opj_image_comp_t& comp, int64_t x, int64_t y) {
    const int32_t raw = comp.data[static_cast<size_t>(y) * comp.w + static_cast<size_t>(x)];
    const int prec = static_cast<int>(comp.prec);
    const int64_t v = int64_t{raw} + (comp.sgnd ? int64_t{1} << (prec - 1) : 0);
    const int64_t shifted = prec >= 8 ? v >> (prec - 8) : v << (8 - prec);
    return static_cast<uint8_t>(std::clamp<int64_t>(shifted, 0, 255));
}

RgbImage decode_jpeg2000(Bytes data, bool codestream) {
    MemoryCursor cursor{data};
    std::unique_ptr<opj_stream_t, OpjStreamFree> stream(opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE));
    if (!stream) fail("JPEG 2000: out of memory");
    opj_stream_set_user_data(stream.get(), &cursor, nullptr);
    opj_stream_set_user_data_length(stream.get(), data.size());
    opj_stream_set_read_function(stream.get(), opj_read_memory);
    opj_stream_set_skip_function(stream.get(), opj_skip_memory);
    opj_stream_set_seek_function(stream.get(), opj_seek_memory);
    std::unique_ptr<opj_codec_t, OpjCodecFree> codec(opj_create_decompress(codestream ? OPJ_CODEC_J2K : OPJ_CODEC_JP2));
    if (!codec) fail("JPEG 2000: out of memory");
    opj_set_info_handler(codec.get(), opj_quiet, nullptr);
    opj_set_warning_handler(codec.get(), opj_quiet, nullptr);
    opj_set_error_handler(codec.get(), opj_quiet, nullptr);
    opj_dparameters_t parameters;
    opj_set_default_decoder_parameters(&parameters);
    if (!opj_setup_decoder(codec.get(), &parameters)) fail("JPEG 2000: decoder setup failed");
    opj_image_t* header = nullptr;
    if (!opj_read_header(stream.get(), codec.get(), &header)) fail("JPEG 2000: invalid header");
    std::unique_ptr<opj_image_t, OpjImageFree> owned(header);
    // Refuse oversized images before opj_decode allocates the component planes.
    if (header->numcomps == 0 || header->x1 <= header->x0 || header->y1 <= header->y0) fail("JPEG 2000: no pixels");
    check_dimensions(int64_t{header->x1} - header->x0, int64_t{header->y1} - header->y0, "JPEG 2000");
    if (!opj_decode(codec.get(), stream.get(), header) || !opj_end_decompress(codec.get(), stream.get()))
        fail("JPEG 2000: corrupt or truncated stream");

    const opj_image_comp_t* comps = header->comps;
    const int64_t width = comps[0].w, height = comps[0].h;
    RgbImage image = allocate_rgb(width, height, "JPEG 2000");
    const uint32_t color_components = header->numcomps >= 3 ? 3 : 1;  // a 2nd/4th component is alpha
    for (uint32_t c = 0; c < color_components; ++c) {
        if (comps[c].data == nullptr || comps[c].w == 0 || comps[c].h == 0 || comps[c].prec < 1 || comps[c].prec > 31)
            fail("JPEG 2000: unsupported component layout");
    }
    const bool ycc = color_components == 3 && header->color_space == OPJ_CLRSPC_SYCC;
    for (int64_t y = 0; y < height; ++y) {
        uint8_t* out = image.row(y);
        for (int64_t x = 0; x < width; ++x, out += 3) {
            uint8_t v[3];
            for (uint32_t c = 0; c < color_components; ++c) {
                // Subsampled (chroma) components are sampled at the matching position.
                v[c] = j2k_sample(comps[c], x * comps[c].w / width, y * comps[c].h / height);
            }
            if (color_components == 1) {
                out[0] = out[1] = out[2] = v[0];
            } else if (ycc) {
                const double luma = v[0], cb = v[1] - 128.0, cr = v[2] - 128.0;
                out[0] = static_cast<uint8_t>(std::clamp(std::lround(luma + 1.402 * cr), 0L, 255L));
                out[1] = static_cast<uint8_t>(std::clamp(std::lround(luma - 0.344136 * cb - 0.714136 * cr), 0L, 255L));
                out[2] = static_cast<uint8_t>(std::clamp(std::lround(luma + 1.772 * cb), 0L, 255L));
            } else {
                std::copy_n(v, 3, out);
            }
        }
    }
    return image;
}

// ---- Format dispatch ---------------------------------------------------------------------------------------------

RgbImage decode_any(Bytes data) {
    if (starts_with(data, {0xFF, 0xD8, 0xFF})) return decode_jpeg(data);
    if (starts_with(data, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A})) return decode_png(data);
    if (starts_with(data, {'B', 'M'})) return decode_bmp(data);
    if (data.size() >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6') return decode_pnm(data);
    if (starts_with(data, {'I', 'I', 0x2A, 0x00}) || starts_with(data, {'M', 'M', 0x00, 0x2A}) ||
        starts_with(data, {'I', 'I', 0x2B, 0x00}) || starts_with(data, {'M', 'M', 0x00, 0x2B}))
        return decode_tiff(data);
    if (data.size() >= 12 && starts_with(data, {'R', 'I', 'F', 'F'}) &&
        std::equal(data.begin() + 8, data.begin() + 12, "WEBP"))
        return decode_webp(data);
    if (starts_with(data, {0x00, 0x00, 0x00, 0x0C, 'j', 'P', ' ', ' ', 0x0D, 0x0A, 0x87, 0x0A}))
        return decode_jpeg2000(data, /*codestream=*/false);
    if (starts_with(data, {0xFF, 0x4F, 0xFF, 0x51})) return decode_jpeg2000(data, /*codestream=*/true);
    fail("unknown image format");
}

}  // namespace

RgbImage decode_rgb(std::span<const uint8_t> encoded) {
    try {
        return decode_any(encoded);
    } catch (const DecodeError&) {
        return RgbImage{};  // the spec's empty matrix for undecodable data
    }
}

}  // namespace tessera::image
