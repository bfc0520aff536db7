#include "model_instance.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "triton_support.h"

namespace tessera_triton {

// One input of one request as read from Triton.
struct RequestInput {
    const TensorConfig* config = nullptr;
    TRITONBACKEND_Input* handle = nullptr;
    std::vector<int64_t> shape;             // as the request has it (batch dimension first when batching)
    std::vector<int64_t> model_item_shape;  // what the model gets per batch, without the batch dimension
    uint64_t byte_size = 0;
    uint32_t buffer_count = 0;
};

// A request while one execute call handles it.  `error` is the first error it met; it is sent instead of outputs.
struct PendingRequest {
    TRITONBACKEND_Request* request = nullptr;
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* error = nullptr;
    int64_t batch_size = 1;
    std::vector<RequestInput> inputs;  // in configuration order
    std::vector<std::string> requested_outputs;
    uint64_t compute_start_ns = 0;
    uint64_t compute_end_ns = 0;

    bool active() const noexcept { return response != nullptr && error == nullptr; }
    void fail(TRITONSERVER_Error* e) noexcept {
        if (error == nullptr) {
            error = e;
        } else {
            TRITONSERVER_ErrorDelete(e);
        }
    }
    bool wants(const std::string& output_name) const {
        for (const std::string& n : requested_outputs)
            if (n == output_name) return true;
        return false;
    }
};

namespace {

// The element count of `dims`.  Request shapes come from clients, so a negative dimension or a product that
// overflows is an error rather than a wrapped count that would size the copies below.
int64_t element_count(const std::vector<int64_t>& dims) {
    int64_t count = 1;
    for (int64_t d : dims)
        if (d < 0 || __builtin_mul_overflow(count, d, &count))
            throw invalid_arg("shape " + shape_text(dims) + " has no valid element count");
    return count;
}

// True when `shape` fits `expected`, whose -1 entries match anything.
bool shape_fits(const std::vector<int64_t>& shape, const std::vector<int64_t>& expected) {
    if (shape.size() != expected.size()) return false;
    for (size_t d = 0; d < shape.size(); ++d)
        if (expected[d] != -1 && expected[d] != shape[d]) return false;
    return true;
}

// A contiguous CPU buffer of input `input`, or an error for memory we cannot read (GPU memory, which the CPU-only
// path never asks for, but a client with CUDA shared memory could send).
const char* input_buffer(const RequestInput& input, uint32_t index, uint64_t* size) {
    const void* buffer = nullptr;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    check_triton(TRITONBACKEND_InputBuffer(input.handle, index, &buffer, size, &memory_type, &memory_type_id),
                 ("reading input '" + input.config->name + "'").c_str());
    if (memory_type == TRITONSERVER_MEMORY_GPU)
        throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED, "input '" + input.config->name +
                                                               "' is in GPU memory; the tessera backend reads inputs "
                                                               "from CPU memory only");
    return static_cast<const char*>(buffer);
}

// All of an input's bytes in one piece (BYTES elements may straddle the buffers of a request).
std::string input_bytes(const RequestInput& input) {
    std::string bytes;
    for (uint32_t b = 0; b < input.buffer_count; ++b) {
        uint64_t size = 0;
        const char* data = input_buffer(input, b, &size);
        bytes.append(data, size);
    }
    return bytes;
}

// Decodes Triton's BYTES serialization (each element: a 4-byte little-endian length, then the bytes) into
// elements [first, first + count) of a Tessera string tensor.
void decode_bytes_elements(const RequestInput& input, tessera::Value& tensor, size_t first, size_t count) {
    const std::string bytes = input_bytes(input);
    size_t position = 0;
    for (size_t i = 0; i < count; ++i) {
        if (bytes.size() - position < 4)
            throw invalid_arg("input '" + input.config->name + "' holds fewer than the " + std::to_string(count) +
                              " strings its shape " + shape_text(input.shape) + " needs");
        uint32_t length = 0;
        for (int k = 3; k >= 0; --k) length = (length << 8) | static_cast<unsigned char>(bytes[position + k]);
        position += 4;
        if (bytes.size() - position < length)
            throw invalid_arg("input '" + input.config->name + "': string " + std::to_string(i) +
                              " runs past the end of the data");
        tensor.set_string(first + i, std::string_view(bytes.data() + position, length));
        position += length;
    }
    if (position != bytes.size())
        throw invalid_arg("input '" + input.config->name + "' holds more data than the " + std::to_string(count) +
                          " strings of its shape " + shape_text(input.shape));
}

// The batched model input `index` of `batch`: a view of the request's buffer when one request brings it in one
// piece, otherwise a new tensor the requests' buffers are copied into, one after the other.
tessera::Value gather_input(PendingRequest* const* batch, size_t count, size_t index, int64_t total_batch,
                            bool batching) {
    const RequestInput& first = batch[0]->inputs[index];
    const tessera::ElementType type = tessera_type_for(first.config->data_type);
    std::vector<int64_t> dims = first.model_item_shape;
    if (batching) dims.insert(dims.begin(), total_batch);

    if (type == TESS_ELEMENT_STRING) {
        tessera::Value tensor = tessera::Value::tensor(type, dims);
        size_t next = 0;
        for (size_t r = 0; r < count; ++r) {
            const size_t elements = static_cast<size_t>(element_count(batch[r]->inputs[index].shape));
            decode_bytes_elements(batch[r]->inputs[index], tensor, next, elements);
            next += elements;
        }
        return tensor;
    }
    if (count == 1 && first.buffer_count == 1 && first.byte_size > 0) {
        uint64_t size = 0;
        const char* data = input_buffer(first, 0, &size);
        // Tessera reads run inputs and never writes them, so the request's buffer serves as it is, but only when it
        // is aligned to the element size: kernels read it as typed elements, and HTTP binary data follows a JSON
        // header of any length, so its address can be odd.  A misaligned buffer is copied below.
        const size_t element_size = tessera::element_size(type);
        if (element_size != 0 && reinterpret_cast<uintptr_t>(data) % element_size == 0)
            return tessera::Value::tensor_over(type, dims, const_cast<char*>(data), size);
    }
    tessera::Value tensor = tessera::Value::tensor(type, dims);
    char* destination = static_cast<char*>(tensor.raw_data());
    const size_t capacity = tensor.byte_size();
    size_t offset = 0;
    for (size_t r = 0; r < count; ++r) {
        const RequestInput& input = batch[r]->inputs[index];
        for (uint32_t b = 0; b < input.buffer_count; ++b) {
            uint64_t size = 0;
            const char* data = input_buffer(input, b, &size);
            if (size > capacity - offset)
                throw invalid_arg("input '" + input.config->name + "' holds more bytes than its shape " +
                                  shape_text(input.shape) + " needs");
            if (size > 0) std::memcpy(destination + offset, data, size);
            offset += size;
        }
    }
    if (offset != capacity)
        throw internal_error("input '" + first.config->name + "': gathered " + std::to_string(offset) +
                             " bytes for a batch of " + std::to_string(capacity));
    return tensor;
}

// Triton's BYTES serialization of elements [first, first + count) of a string tensor.
std::string encode_bytes_elements(const tessera::Value& tensor, size_t first, size_t count) {
    std::string bytes;
    for (size_t i = first; i < first + count; ++i) {
        const std::string_view element = tensor.string_at(i);
        const auto length = static_cast<uint32_t>(element.size());
        for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((length >> (8 * k)) & 0xff));
        bytes.append(element.data(), element.size());
    }
    return bytes;
}

// Writes `size` bytes into a new output of `response` (through Triton's response API, so that Triton owns the
// memory and sends it without another copy).
void write_output(TRITONBACKEND_Response* response, const TensorConfig& config, const std::vector<int64_t>& shape,
                  const char* data, size_t size) {
    TRITONBACKEND_Output* output = nullptr;
    check_triton(TRITONBACKEND_ResponseOutput(response, &output, config.name.c_str(), config.data_type, shape.data(),
                                              static_cast<uint32_t>(shape.size())),
                 ("creating output '" + config.name + "'").c_str());
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    check_triton(TRITONBACKEND_OutputBuffer(output, &buffer, size, &memory_type, &memory_type_id),
                 ("allocating output '" + config.name + "'").c_str());
    if (size == 0) return;
    if (memory_type == TRITONSERVER_MEMORY_GPU)
        throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED, "output '" + config.name +
                                                               "' was given GPU memory; the tessera backend writes "
                                                               "outputs to CPU memory only");
    std::memcpy(buffer, data, size);
}

TRITONSERVER_Error* copy_error(const TRITONSERVER_Error* error) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ErrorCode(const_cast<TRITONSERVER_Error*>(error)),
                                 TRITONSERVER_ErrorMessage(const_cast<TRITONSERVER_Error*>(error)));
}

}  // namespace

ModelInstance::ModelInstance(ModelState& model, TRITONBACKEND_ModelInstance* triton_instance)
    : model_(model), triton_instance_(triton_instance) {
    const char* instance_name = nullptr;
    check_triton(TRITONBACKEND_ModelInstanceName(triton_instance, &instance_name), "reading the instance name");
    name_ = instance_name;
    TRITONSERVER_InstanceGroupKind kind = TRITONSERVER_INSTANCEGROUPKIND_CPU;
    check_triton(TRITONBACKEND_ModelInstanceKind(triton_instance, &kind), "reading the instance kind");
    int32_t device_id = 0;
    check_triton(TRITONBACKEND_ModelInstanceDeviceId(triton_instance, &device_id), "reading the instance device");
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU && device_id != 0)
        log_warning("instance '" + name_ + "' is placed on GPU " + std::to_string(device_id) +
                    ", but Tessera's CUDA provider chooses its device from TESSERA_CUDA_DEVICE (default 0) for the "
                    "whole process; run one server per GPU to spread instances over GPUs");
    session_ = model.session_for_instance(kind, name_);
    log_info("instance '" + name_ + "' of model '" + model.name() + "' ready (" +
             TRITONSERVER_InstanceGroupKindString(kind) + ")");
}

// Reads and checks one request's inputs and requested outputs.  Triton has checked them against the
// configuration already; these checks guard the copies below and the model's own fixed dimensions (which a
// configuration with -1 may leave open).
void ModelInstance::read_request(PendingRequest& pending) const {
    const ModelConfig& config = model_.config();
    const bool batching = config.max_batch_size > 0;
    int64_t batch_size = -1;
    std::string batch_input;
    for (const TensorConfig& tensor : config.inputs) {
        RequestInput input;
        input.config = &tensor;
        const std::string what = "input '" + tensor.name + "'";
        check_triton(TRITONBACKEND_RequestInput(pending.request, tensor.name.c_str(), &input.handle),
                     ("reading " + what).c_str());
        TRITONSERVER_DataType type = TRITONSERVER_TYPE_INVALID;
        const int64_t* shape = nullptr;
        uint32_t rank = 0;
        check_triton(TRITONBACKEND_InputProperties(input.handle, nullptr, &type, &shape, &rank, &input.byte_size,
                                                   &input.buffer_count),
                     ("reading " + what).c_str());
        input.shape.assign(shape, shape + rank);
        if (type != tensor.data_type)
            throw invalid_arg(what + " has data type " + TRITONSERVER_DataTypeString(type) + " but model '" +
                              model_.name() + "' expects " + TRITONSERVER_DataTypeString(tensor.data_type));

        // Triton has applied the configuration's reshape already: requests arrive in the model's shape.
        std::vector<int64_t> item = input.shape;
        std::vector<int64_t> expected = tensor.reshape ? *tensor.reshape : tensor.dims;
        if (batching) {
            expected.insert(expected.begin(), -1);
            if (!item.empty()) {
                if (batch_size == -1) {
                    batch_size = item[0];
                    batch_input = tensor.name;
                } else if (item[0] != batch_size) {
                    throw invalid_arg(what + " has batch size " + std::to_string(item[0]) + " but input '" +
                                      batch_input + "' has " + std::to_string(batch_size));
                }
                item.erase(item.begin());
            }
        }
        if (!shape_fits(input.shape, expected) || (batching && input.shape[0] < 1))
            throw invalid_arg(what + " has shape " + shape_text(input.shape) + " but model '" + model_.name() +
                              "' expects " + shape_text(expected));
        input.model_item_shape = item;
        const tessera::ValueInfo& model_info = model_.model_input(tensor.name);
        if (model_info.has_shape) {
            std::vector<int64_t> model_item = model_info.dims;
            if (batching && !model_item.empty()) model_item.erase(model_item.begin());
            if (!shape_fits(input.model_item_shape, model_item))
                throw invalid_arg(what + " has shape " + shape_text(input.shape) + " but model '" + model_.name() +
                                  "' expects " + shape_text(model_info.dims));
        }
        if (const size_t element_size = triton_type_size(type); element_size != 0) {
            uint64_t expected_bytes = 0;
            if (__builtin_mul_overflow(static_cast<uint64_t>(element_count(input.shape)), element_size,
                                       &expected_bytes))
                throw invalid_arg(what + " has shape " + shape_text(input.shape) + ", too large to hold");
            if (input.byte_size != expected_bytes)
                throw invalid_arg(what + " has " + std::to_string(input.byte_size) + " bytes but its shape " +
                                  shape_text(input.shape) + " of " + TRITONSERVER_DataTypeString(type) + " needs " +
                                  std::to_string(expected_bytes));
        }
        pending.inputs.push_back(std::move(input));
    }
    pending.batch_size = batching ? std::max<int64_t>(batch_size, 1) : 1;

    uint32_t output_count = 0;
    check_triton(TRITONBACKEND_RequestOutputCount(pending.request, &output_count), "reading the requested outputs");
    for (uint32_t i = 0; i < output_count; ++i) {
        const char* output_name = nullptr;
        check_triton(TRITONBACKEND_RequestOutputName(pending.request, i, &output_name),
                     "reading the requested outputs");
        if (config.find_output(output_name) == nullptr)
            throw invalid_arg("model '" + model_.name() + "' has no output '" + output_name + "'");
        pending.requested_outputs.emplace_back(output_name);
    }
}

// Runs `batch` (requests whose inputs agree on every dimension after the batch one) as one Tessera run and writes
// each request's slice of the outputs into its response.  An error of the run itself is thrown (every request of
// the batch gets it); an error writing one response fails that request alone.
void ModelInstance::run_batch(PendingRequest* const* batch, size_t count) {
    const ModelConfig& config = model_.config();
    const bool batching = config.max_batch_size > 0;
    int64_t total_batch = 0;
    for (size_t r = 0; r < count; ++r) total_batch += batch[r]->batch_size;
    if (batching && total_batch > config.max_batch_size)
        throw internal_error("batch of " + std::to_string(total_batch) + " for model '" + model_.name() +
                             "' exceeds its max_batch_size " + std::to_string(config.max_batch_size));

    std::vector<std::string> input_names;
    std::vector<tessera::Value> inputs;
    for (size_t i = 0; i < config.inputs.size(); ++i) {
        input_names.push_back(config.inputs[i].name);
        inputs.push_back(gather_input(batch, count, i, total_batch, batching));
    }
    // Only the outputs some request asked for are computed.
    std::vector<const TensorConfig*> outputs_wanted;
    std::vector<std::string> output_names;
    for (const TensorConfig& output : config.outputs) {
        for (size_t r = 0; r < count; ++r) {
            if (batch[r]->wants(output.name)) {
                outputs_wanted.push_back(&output);
                output_names.push_back(output.name);
                break;
            }
        }
    }
    if (output_names.empty()) return;  // nothing asked for: empty responses

    const uint64_t compute_start = now_ns();
    std::vector<tessera::Value> results = session_->run(input_names, inputs, output_names);
    const uint64_t compute_end = now_ns();
    for (size_t r = 0; r < count; ++r) {
        batch[r]->compute_start_ns = compute_start;
        batch[r]->compute_end_ns = compute_end;
    }

    for (size_t k = 0; k < results.size(); ++k) {
        const TensorConfig& config_output = *outputs_wanted[k];
        const tessera::Value& result = results[k];
        const std::string what = "output '" + config_output.name + "'";
        if (result.kind() != TESS_VALUE_TENSOR)
            throw internal_error(what + " of model '" + model_.name() + "' is a " +
                                 tessera::value_kind_name(result.kind()) + ", not a tensor");
        if (result.element_type() != tessera_type_for(config_output.data_type))
            throw internal_error(what + " is " + tessera::element_type_name(result.element_type()) +
                                 " but the configuration says " + config_type_name(config_output.data_type));
        std::vector<int64_t> item = result.dims();
        if (batching) {
            if (item.empty() || item[0] != total_batch)
                throw internal_error(what + " has shape " + shape_text(item) + " for a batch of " +
                                     std::to_string(total_batch) +
                                     ": its first dimension is not the batch, so the model cannot batch; set "
                                     "max_batch_size: 0");
            item.erase(item.begin());
        }
        // Outputs leave in the model's shape: Triton applies the configuration's reshape to them itself.
        const int64_t item_elements = element_count(item);
        const bool is_string = result.element_type() == TESS_ELEMENT_STRING;
        const size_t item_bytes = is_string ? 0 : tess_element_storage_bytes(result.element_type(), item_elements);
        const char* data = is_string ? nullptr : static_cast<const char*>(result.raw_data());

        int64_t offset = 0;  // in batch items
        for (size_t r = 0; r < count; ++r) {
            PendingRequest& request = *batch[r];
            const int64_t items = request.batch_size;
            if (request.active() && request.wants(config_output.name)) {
                try {
                    std::vector<int64_t> shape = item;
                    if (batching) shape.insert(shape.begin(), items);
                    if (is_string) {
                        const std::string bytes =
                            encode_bytes_elements(result, static_cast<size_t>(offset * item_elements),
                                                  static_cast<size_t>(items * item_elements));
                        write_output(request.response, config_output, shape, bytes.data(), bytes.size());
                    } else {
                        write_output(request.response, config_output, shape, data + offset * item_bytes,
                                     static_cast<size_t>(items) * item_bytes);
                    }
                } catch (...) {
                    request.fail(current_exception_to_triton());
                }
            }
            offset += items;
        }
    }
}

void ModelInstance::execute(TRITONBACKEND_Request** requests, uint32_t request_count) noexcept {
    const uint64_t exec_start = now_ns();
    std::vector<PendingRequest> pending;
    struct BatchRecord {
        uint64_t size, compute_start, compute_end;
    };
    std::vector<BatchRecord> batches;
    try {
        pending.resize(request_count);
        batches.reserve(request_count);
    } catch (...) {
        // Out of memory before anything started: every request still has to be answered and released.
        for (uint32_t i = 0; i < request_count; ++i) {
            TRITONBACKEND_Response* response = nullptr;
            if (TRITONSERVER_Error* new_error = TRITONBACKEND_ResponseNew(&response, requests[i])) {
                log_and_delete(new_error, "creating a response");
            } else {
                TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "out of memory");
                log_and_delete(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error),
                               "sending a response");
                TRITONSERVER_ErrorDelete(error);  // ResponseSend leaves the error with us
            }
            log_and_delete(TRITONBACKEND_RequestRelease(requests[i], TRITONSERVER_REQUEST_RELEASE_ALL),
                           "releasing a request");
        }
        return;
    }

    for (uint32_t i = 0; i < request_count; ++i) {
        PendingRequest& request = pending[i];
        request.request = requests[i];
        TRITONSERVER_Error* error = TRITONBACKEND_ResponseNew(&request.response, request.request);
        if (error != nullptr) {
            request.response = nullptr;
            log_and_delete(error, "creating a response");
            continue;
        }
        try {
            read_request(request);
            bool cancelled = false;
            // A failed check is not a cancellation: the request is served, and the error is logged and freed.
            if (TRITONSERVER_Error* error = TRITONBACKEND_RequestIsCancelled(request.request, &cancelled))
                log_and_delete(error, "checking whether a request was cancelled");
            else if (cancelled)
                throw BackendError(TRITONSERVER_ERROR_CANCELLED, "request cancelled");
        } catch (...) {
            request.fail(current_exception_to_triton());
        }
    }

    auto run_and_record = [&](PendingRequest* const* batch, size_t count) {
        try {
            run_batch(batch, count);
            uint64_t size = 0;
            for (size_t r = 0; r < count; ++r) size += static_cast<uint64_t>(batch[r]->batch_size);
            if (batch[0]->compute_end_ns != 0)
                batches.push_back({size, batch[0]->compute_start_ns, batch[0]->compute_end_ns});
        } catch (...) {
            TRITONSERVER_Error* error = current_exception_to_triton();
            for (size_t r = 0; r < count; ++r)
                if (batch[r]->active()) batch[r]->fail(copy_error(error));
            TRITONSERVER_ErrorDelete(error);
        }
    };

    try {
        if (model_.config().max_batch_size > 0) {
            // One rectangular batch: the first good request sets the dimensions after the batch one, and a request
            // that differs gets an error of its own instead of failing everyone's run.
            std::vector<PendingRequest*> batch;
            for (PendingRequest& request : pending) {
                if (!request.active()) continue;
                if (!batch.empty()) {
                    const PendingRequest& first = *batch.front();
                    for (size_t i = 0; i < request.inputs.size(); ++i) {
                        if (request.inputs[i].model_item_shape != first.inputs[i].model_item_shape) {
                            std::vector<int64_t> batch_shape = first.inputs[i].shape;
                            batch_shape[0] = -1;
                            request.fail(TRITONSERVER_ErrorNew(
                                TRITONSERVER_ERROR_INVALID_ARG,
                                ("ragged batch: input '" + request.inputs[i].config->name + "' has shape " +
                                 shape_text(request.inputs[i].shape) + " but the batch it was scheduled with has " +
                                 shape_text(batch_shape) +
                                 "; Tessera runs rectangular batches only (pad the input, or send it again)")
                                    .c_str()));
                            break;
                        }
                    }
                    if (!request.active()) continue;
                }
                batch.push_back(&request);
            }
            if (!batch.empty()) run_and_record(batch.data(), batch.size());
        } else {
            for (PendingRequest& request : pending) {
                PendingRequest* single = &request;
                if (request.active()) run_and_record(&single, 1);
            }
        }
    } catch (...) {
        TRITONSERVER_Error* error = current_exception_to_triton();
        for (PendingRequest& request : pending)
            if (request.active()) request.fail(copy_error(error));
        TRITONSERVER_ErrorDelete(error);
    }

    const uint64_t exec_end = now_ns();
    for (PendingRequest& request : pending) {
        bool success = false;
        if (request.response != nullptr) {
            TRITONSERVER_Error* send_error =
                TRITONBACKEND_ResponseSend(request.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, request.error);
            success = request.error == nullptr && send_error == nullptr;
            log_and_delete(send_error, "sending a response");
        }
        if (request.error != nullptr) TRITONSERVER_ErrorDelete(request.error);
        const uint64_t compute_start = request.compute_start_ns != 0 ? request.compute_start_ns : exec_start;
        const uint64_t compute_end = request.compute_end_ns != 0 ? request.compute_end_ns : exec_start;
        log_and_delete(TRITONBACKEND_ModelInstanceReportStatistics(triton_instance_, request.request, success,
                                                                   exec_start, compute_start, compute_end, exec_end),
                       "reporting request statistics");
        log_and_delete(TRITONBACKEND_RequestRelease(request.request, TRITONSERVER_REQUEST_RELEASE_ALL),
                       "releasing a request");
    }
    for (const BatchRecord& record : batches)
        log_and_delete(TRITONBACKEND_ModelInstanceReportBatchStatistics(triton_instance_, record.size, exec_start,
                                                                        record.compute_start, record.compute_end,
                                                                        exec_end),
                       "reporting batch statistics");
}

}  // namespace tessera_triton
