// Fuzzes TensorProto decoding (tessera::tensor_from_proto and take_tensor_from_proto): the bytes are a serialized
// TensorProto.  Typed fields, raw data, sub-byte packing and strings are decoded as for an initializer; external
// data is resolved against a model directory this harness prepares once with every kind of file the checks must
// handle, so that the fuzzer can name them (tests/fuzz/tessera.dict lists the names):
//
//   model/data.bin     a regular file of 4096 bytes          model/sub/inner.bin  a regular file in a subdirectory
//   model/empty.bin    a regular file of 0 bytes             model/sub            a directory
//   model/link_in      symbolic link to data.bin (inside)    model/link_out       symbolic link to ../outside.bin
//   model/hard         hard link to ../outside_hard.bin      model/fifo           a FIFO (must not block the read)
//
// A decoded tensor is read back in full so that a buffer smaller than its shape is caught by ASan.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <onnx/onnx_pb.h>

#include "common/status.h"
#include "common/value.h"
#include "model/tensor_proto.h"

namespace fs = std::filesystem;

extern "C" const char* __asan_default_options() {
    return "allocator_may_return_null=1:max_allocation_size_mb=256:detect_leaks=1";
}

namespace {

fs::path g_root;  // the temporary tree; removed at exit
tessera::ExternalDataPolicy g_policy;
const tessera::ExternalDataPolicy g_no_external;  // external data forbidden

void write_file(const fs::path& path, size_t bytes) {
    std::ofstream out(path, std::ios::binary);
    for (size_t i = 0; i < bytes; ++i) out.put(static_cast<char>(i * 131 + 7));
}

void must(bool ok, const char* what) {
    if (ok) return;
    std::perror(what);
    std::abort();
}

void prepare_tree() {
    std::string pattern = (fs::temp_directory_path() / "tessera-fuzz-tensor-XXXXXX").string();
    must(::mkdtemp(pattern.data()) != nullptr, "mkdtemp");
    g_root = pattern;
    const fs::path model = g_root / "model";
    fs::create_directories(model / "sub");
    write_file(model / "data.bin", 4096);
    write_file(model / "empty.bin", 0);
    write_file(model / "sub" / "inner.bin", 256);
    write_file(g_root / "outside.bin", 4096);
    write_file(g_root / "outside_hard.bin", 4096);
    fs::create_symlink("data.bin", model / "link_in");
    fs::create_symlink("../outside.bin", model / "link_out");
    fs::create_hard_link(g_root / "outside_hard.bin", model / "hard");
    must(::mkfifo((model / "fifo").c_str(), 0600) == 0, "mkfifo");
    g_policy.model_dir = model;
    std::atexit([] {
        std::error_code ec;
        fs::remove_all(g_root, ec);
    });
}

uint64_t touch(const TessValue& value) {
    uint64_t sum = 0;
    if (value.element_type == TESS_ELEMENT_STRING) {
        for (const auto& s : value.strings)
            for (char c : s) sum += static_cast<unsigned char>(c);
        return sum;
    }
    const auto* bytes = static_cast<const unsigned char*>(value.data);
    for (size_t i = 0; i < value.byte_size; ++i) sum += bytes[i];
    return sum;
}

// Decodes with one of the two entry points; an error is an expected outcome, anything but tessera's own error type
// (or a failed allocation) escaping is a finding.
template <typename Decode> void decode(Decode&& decode_fn) {
    try {
        tessera::ValuePtr value = decode_fn();
        volatile uint64_t sink = touch(*value);
        (void)sink;
    } catch (const tessera::Error&) {
    } catch (const std::bad_alloc&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    prepare_tree();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    onnx::TensorProto proto;
    if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
    decode([&] { return tessera::tensor_from_proto(proto, g_policy, "fuzzed tensor"); });
    decode([&] { return tessera::tensor_from_proto(proto, g_no_external, "fuzzed tensor"); });
    // take_tensor_from_proto moves raw data out of the proto: give it its own copy.
    onnx::TensorProto owned = proto;
    decode([&] { return tessera::take_tensor_from_proto(owned, g_policy, "fuzzed tensor"); });
    return 0;
}
