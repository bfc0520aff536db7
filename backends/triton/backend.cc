// The entry points Triton calls in libtriton_tessera.so.  Each one turns every exception into a
// TRITONSERVER_Error*, so nothing escapes into the server and nothing aborts it.
#include <memory>
#include <string>

#include "model_instance.h"
#include "model_state.h"
#include "triton_support.h"

using namespace tessera_triton;

namespace {

BackendState& backend_state(TRITONBACKEND_Backend* backend) {
    void* state = nullptr;
    check_triton(TRITONBACKEND_BackendState(backend, &state), "reading the backend state");
    if (state == nullptr) throw internal_error("the tessera backend is not initialized");
    return *static_cast<BackendState*>(state);
}

ModelState& model_state(TRITONBACKEND_Model* model) {
    void* state = nullptr;
    check_triton(TRITONBACKEND_ModelState(model, &state), "reading the model state");
    if (state == nullptr) throw internal_error("the model has no tessera state");
    return *static_cast<ModelState*>(state);
}

}  // namespace

extern "C" {

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
    return guarded([&] {
        uint32_t major = 0, minor = 0;
        check_triton(TRITONBACKEND_ApiVersion(&major, &minor), "reading Triton's backend API version");
        // Same major and at least our minor: the server provides every function this backend was built against.
        if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR)
            throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED,
                               "Triton's backend API " + std::to_string(major) + "." + std::to_string(minor) +
                                   " does not support the tessera backend, built for " +
                                   std::to_string(TRITONBACKEND_API_VERSION_MAJOR) + "." +
                                   std::to_string(TRITONBACKEND_API_VERSION_MINOR));
        // Triton owns this message: it is read, never deleted.
        TRITONSERVER_Message* message = nullptr;
        check_triton(TRITONBACKEND_BackendConfig(backend, &message), "reading the backend configuration");
        const char* base = nullptr;
        size_t size = 0;
        check_triton(TRITONSERVER_MessageSerializeToJson(message, &base, &size), "reading the backend configuration");
        const std::string text(base, size);
        nlohmann::json config = text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text, nullptr, false);
        if (config.is_discarded()) throw internal_error("the backend configuration is not valid JSON");
        auto state = std::make_unique<BackendState>(config);
        check_triton(TRITONBACKEND_BackendSetState(backend, state.get()), "setting the backend state");
        state.release();
        log_info("tessera backend: Tessera " + tessera::version() + ", Triton backend API " + std::to_string(major) +
                 "." + std::to_string(minor) + " (built for " + std::to_string(TRITONBACKEND_API_VERSION_MAJOR) +
                 "." + std::to_string(TRITONBACKEND_API_VERSION_MINOR) + ")");
    });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
    return guarded([&] {
        void* state = nullptr;
        check_triton(TRITONBACKEND_BackendState(backend, &state), "reading the backend state");
        delete static_cast<BackendState*>(state);
    });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
    return guarded([&] {
        TRITONBACKEND_Backend* backend = nullptr;
        check_triton(TRITONBACKEND_ModelBackend(model, &backend), "reading the model's backend");
        auto state = std::make_unique<ModelState>(model, backend_state(backend));
        check_triton(TRITONBACKEND_ModelSetState(model, state.get()), "setting the model state");
        state.release();
    });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
    return guarded([&] {
        void* state = nullptr;
        check_triton(TRITONBACKEND_ModelState(model, &state), "reading the model state");
        delete static_cast<ModelState*>(state);
    });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
    return guarded([&] {
        TRITONBACKEND_Model* model = nullptr;
        check_triton(TRITONBACKEND_ModelInstanceModel(instance, &model), "reading the instance's model");
        auto state = std::make_unique<ModelInstance>(model_state(model), instance);
        check_triton(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "setting the instance state");
        state.release();
    });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
    return guarded([&] {
        void* state = nullptr;
        check_triton(TRITONBACKEND_ModelInstanceState(instance, &state), "reading the instance state");
        delete static_cast<ModelInstance*>(state);
    });
}

// Triton never calls this for one instance from two threads at once, but different instances (of this model and
// of others) run concurrently: everything it touches is the instance's own or read-only model state.
TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                         TRITONBACKEND_Request** requests,
                                                                         const uint32_t request_count) {
    void* state = nullptr;
    TRITONSERVER_Error* error = TRITONBACKEND_ModelInstanceState(instance, &state);
    if (error != nullptr || state == nullptr) {
        // Returning an error hands the requests back to Triton, which answers them with it.
        if (error != nullptr) return error;
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the instance has no tessera state");
    }
    // From here on the backend owns the requests: execute answers and releases every one of them, and never throws.
    static_cast<ModelInstance*>(state)->execute(requests, request_count);
    return nullptr;
}

// Instances of a model may be created in parallel: they compile their sessions in parallel while ModelState keeps
// its bookkeeping of sessions under a lock, and the environments are shared under the backend's lock.
TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend* /*backend*/,
                                                                        TRITONBACKEND_BackendAttribute* attributes) {
    return guarded([&] {
        check_triton(TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(attributes, true),
                     "setting parallel instance loading");
    });
}

}  // extern "C"
