// The image provider: ONNX's ImageDecoder (opset 20) as a plugin of its own, so that the CPU provider needs no image
// codec libraries and a deployment without images can leave this file out.  It is a general-purpose fallback (like
// the CPU provider, it joins every non-strict session), works in host memory (no copies at its boundaries) and runs
// each ImageDecoder node with the decoders of decoders.cc, which live with the codec libraries in
// image/libtessera_image_codecs.so next to this file, opened on the first decode (codecs_api.h).
//
// Every function the core calls is an ABI boundary: it catches everything and returns a status instead.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "codecs_api.h"
#include "decoders.h"
#include "tessera/plugin_support.hpp"

using namespace tessera;

namespace {

const TessHostApi* g_host = nullptr;

template <typename Fn> TessStatus* guarded(const char* what, Fn&& fn) noexcept {
    return support::guarded(g_host, what, std::forward<Fn>(fn));
}

[[noreturn]] void fail(int32_t code, const std::string& message) { throw support::Error(code, message); }

// Why the image provider cannot run `node` ("" when it can).
std::string decline_reason(const TessNodeView& node, image::PixelFormat& format) {
    if (node.domain[0] != '\0' && std::strcmp(node.domain, "ai.onnx") != 0)
        return std::string("domain '") + node.domain + "' is not served";
    if (std::strcmp(node.op_type, "ImageDecoder") != 0) return std::string("runs only ImageDecoder");
    if (node.opset < 20) return "ImageDecoder exists from opset 20, the model has " + std::to_string(node.opset);
    if (node.input_count != 1 || node.inputs[0] == nullptr || node.output_count != 1 || node.outputs[0] == nullptr)
        return "ImageDecoder takes one input and gives one output";
    const int32_t type = node.inputs[0]->element_type;
    if (type != TESS_ELEMENT_UNDEFINED && type != TESS_ELEMENT_UINT8)
        return std::string("encoded_stream must be uint8, it is ") + support::element_type_name(type);
    std::string name = "RGB";
    for (size_t a = 0; a < node.attribute_count; ++a) {
        const TessAttributeView& attribute = *node.attributes[a];
        if (std::strcmp(attribute.name, "pixel_format") != 0) continue;
        if (attribute.type != TESS_ATTR_STRING) return "pixel_format must be a string";
        name.assign(attribute.s, attribute.s_len);
    }
    const std::optional<image::PixelFormat> parsed = image::parse_pixel_format(name);
    if (!parsed) return "pixel_format must be RGB, BGR or Grayscale, got '" + name + "'";
    format = *parsed;
    return "";
}

// One ImageDecoder of a compiled group: the group input it reads and the group output it gives.  ImageDecoder's
// output (H, W, C) cannot feed another one's 1-D input, so every step reads a group input and writes a group output.
struct Step {
    image::PixelFormat format = image::PixelFormat::RGB;
    size_t input = 0, output = 0;
};

}  // namespace

struct TessProviderInstance {};

struct TessCompiled {
    std::vector<Step> steps;  // topological order
};

namespace {

TessStatus* create_instance(void*, const TessProviderOptions*, TessProviderInstance** out) {
    return guarded("image: create_instance", [&] { *out = new TessProviderInstance; });
}

void release_instance(TessProviderInstance* instance) { delete instance; }

TessStatus* get_capability(TessProviderInstance*, const TessGraphView* graph, TessCapabilityContext* context) {
    return guarded("image: get_capability", [&] {
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView& node = *graph->nodes[n];
            image::PixelFormat format;
            const std::string why = decline_reason(node, format);
            if (why.empty()) g_host->capability_claim(context, node.index);
            else g_host->capability_decline(context, node.index, why.c_str());
        }
    });
}

TessStatus* compile(TessProviderInstance*, const TessGraphView* graph, TessCompiled** out) {
    return guarded("image: compile", [&] {
        auto compiled = std::make_unique<TessCompiled>();
        // The position of `name` among `count` group values.
        auto position = [](const TessValueView* const* values, size_t count, const char* name) {
            for (size_t i = 0; i < count; ++i)
                if (std::strcmp(values[i]->name, name) == 0) return i;
            fail(TESS_STATUS_INTERNAL, std::string("image: '") + name + "' is not among the group's values");
        };
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView& node = *graph->nodes[n];
            Step step;
            const std::string why = decline_reason(node, step.format);
            if (!why.empty()) fail(TESS_STATUS_INVALID_ARGUMENT, why);
            step.input = position(graph->inputs, graph->input_count, node.inputs[0]->name);
            step.output = position(graph->outputs, graph->output_count, node.outputs[0]->name);
            compiled->steps.push_back(step);
        }
        *out = compiled.release();
    });
}

void release_compiled(TessCompiled* compiled) { delete compiled; }

// ---- The decoders' library -------------------------------------------------------------------------------------

struct Codecs {
    TessImageDecodeFn decode = nullptr;
    TessImageFreeFn free = nullptr;
    std::string error;  // why they could not be loaded ("" when loaded)
};

// Opened once, on the first decode; never closed (a decode may run on any thread until the process ends).
const Codecs& codecs() {
    static const Codecs loaded = [] {
        Codecs c;
        const std::string path = support::library_directory(reinterpret_cast<const void*>(&codecs)) +
                                 "/image/" TESS_IMAGE_CODECS_FILE;
        dlerror();
        void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (library == nullptr) {
            const char* why = dlerror();
            c.error = "cannot load the image decoders: " + std::string(why != nullptr ? why : path);
            return c;
        }
        c.decode = reinterpret_cast<TessImageDecodeFn>(dlsym(library, "tess_image_codecs_decode_rgb"));
        c.free = reinterpret_cast<TessImageFreeFn>(dlsym(library, "tess_image_codecs_free"));
        if (c.decode == nullptr || c.free == nullptr) c.error = path + " lacks the decoder functions";
        return c;
    }();
    return loaded;
}

// decode_rgb through the decoders' library.
image::RgbImage decode_rgb(const uint8_t* bytes, size_t size) {
    const Codecs& c = codecs();
    if (!c.error.empty()) fail(TESS_STATUS_UNAVAILABLE, "image: " + c.error);
    image::RgbImage rgb;
    uint8_t* pixels = c.decode(bytes, size, &rgb.width, &rgb.height);
    if (rgb.width < 0) throw std::bad_alloc();
    if (pixels != nullptr) {
        rgb.pixels.assign(pixels, pixels + rgb.width * rgb.height * 3);
        c.free(pixels);
    } else {
        rgb.width = rgb.height = 0;
    }
    return rgb;
}

// Decodes one stream into a tensor of this provider's (host) memory; the caller owns the result.
TessValue* decode(const TessValue* encoded, image::PixelFormat format, TessComputeContext* context, size_t output) {
    if (g_host->value_kind(encoded) != TESS_VALUE_TENSOR || g_host->value_element_type(encoded) != TESS_ELEMENT_UINT8 ||
        g_host->tensor_rank(encoded) != 1) {
        const int64_t* dims = g_host->tensor_dims(encoded);
        fail(TESS_STATUS_INVALID_ARGUMENT, "image: ImageDecoder's encoded_stream must be a 1-D uint8 tensor, got " +
                                               support::shape_string(dims, g_host->tensor_rank(encoded)));
    }
    const auto* bytes = static_cast<const uint8_t*>(g_host->tensor_const_data(encoded));
    const image::RgbImage rgb = decode_rgb(bytes, static_cast<size_t>(g_host->tensor_element_count(encoded)));
    const int64_t dims[3] = {rgb.height, rgb.width, image::channels_of(format)};
    TessValue* out = nullptr;
    support::throw_if_error(g_host, g_host->compute_allocate_output(context, output, TESS_ELEMENT_UINT8, dims, 3, &out));
    image::convert_pixels(rgb, format, static_cast<uint8_t*>(g_host->tensor_data(out)));
    return out;
}

TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    return guarded("image: compute", [&] {
        for (const Step& step : compiled->steps) {
            const TessValue* encoded = g_host->compute_input(context, step.input);
            if (encoded == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "image: ImageDecoder's input is missing");
            decode(encoded, step.format, context, step.output);
        }
    });
}

const TessMemoryKind kHostMemory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};
const TessMemoryKind* memory_kind(TessProviderInstance*) { return &kHostMemory; }

TessStatus* allocate(TessProviderInstance*, size_t bytes, size_t alignment, void** out) {
    return guarded("image: allocate", [&] {
        if (alignment < sizeof(void*)) alignment = sizeof(void*);
        if (posix_memalign(out, alignment, bytes == 0 ? 1 : bytes) != 0) throw std::bad_alloc();
    });
}

void free_memory(TessProviderInstance*, void* pointer) { std::free(pointer); }

TessProviderApi make_provider() {
    TessProviderApi api{};
    api.struct_size = sizeof(TessProviderApi);
    api.name = "image";
    api.create_instance = create_instance;
    api.release_instance = release_instance;
    api.get_capability = get_capability;
    api.compile = compile;
    api.release_compiled = release_compiled;
    api.compute = compute;
    api.memory_kind = memory_kind;
    api.allocate = allocate;
    api.free = free_memory;
    api.is_fallback = 1;  // it serves an operator nobody else runs: every non-strict session may need it
    return api;
}

const TessProviderApi kProvider = make_provider();
const TessProviderApi* const kProviders[] = {&kProvider};
const auto kPlugin = support::PluginDescription::of_providers("tessera-image", "1.0", kProviders);

}  // namespace

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    static std::once_flag initialized;
    return support::enter_plugin(host, exports, kPlugin, initialized, [host] { g_host = host; });
}
