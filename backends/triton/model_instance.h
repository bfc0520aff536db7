// One model instance of the Tessera backend: the session it runs and the execution of the requests Triton hands
// it.  Requests of one call are gathered into one batched run (rectangular batches only: a request whose
// dimensions after the first differ from the batch's gets its own error and the rest are served), and the outputs
// are scattered back into each request's response through Triton's response API.
#pragma once

#include <memory>
#include <string>

#include "model_state.h"
#include "tessera/tessera.hpp"
#include "triton/core/tritonbackend.h"

namespace tessera_triton {

struct PendingRequest;

class ModelInstance {
public:
    ModelInstance(ModelState& model, TRITONBACKEND_ModelInstance* triton_instance);

    // Answers every request (a response, or an error response) and releases it; never throws: once Triton has
    // handed requests over, the backend owns them whatever happens.
    void execute(TRITONBACKEND_Request** requests, uint32_t request_count) noexcept;

    const std::string& name() const noexcept { return name_; }

private:
    void read_request(PendingRequest& pending) const;
    void run_batch(PendingRequest* const* batch, size_t count);

    ModelState& model_;
    TRITONBACKEND_ModelInstance* triton_instance_;
    std::string name_;
    std::shared_ptr<tessera::Session> session_;
};

}  // namespace tessera_triton
