// CPU provider: steps that take over the step producing one of their inputs (ProducerFusingKernel), so that the
// value between them is never written to memory and read back.  The producer's inputs become the consumer's, the
// producer's step stays in place with no kernel, and the value it made is never made.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "runtime/graph_executor.h"

namespace tessera::cpu {

void CompiledGraph::fuse_producers() {
    // TESSERA_CPU_FUSE_PRODUCERS=0 keeps every step on its own (for measurements and tests).
    if (const char* env = std::getenv("TESSERA_CPU_FUSE_PRODUCERS"); env != nullptr && std::string_view(env) == "0")
        return;
    std::vector<int> readers(values_.size(), 0);
    for (const Step& step : steps_)
        for (int id : step.inputs)
            if (id >= 0) ++readers[id];
    for (size_t s = 0; s < steps_.size(); ++s) {
        Step& consumer = steps_[s];
        auto* fusing = dynamic_cast<ProducerFusingKernel*>(consumer.kernel.get());
        if (fusing == nullptr) continue;
        for (size_t i = 0; i < consumer.inputs.size(); ++i) {
            const int id = consumer.inputs[i];
            if (id < 0) continue;
            ValueInfo& value = values_[id];
            // Only a value this consumer alone reads, which is not a graph output nor placed in a Concat.
            if (value.producer < 0 || readers[id] != 1 || value.output >= 0 || value.concat_into >= 0) continue;
            Step& producer = steps_[static_cast<size_t>(value.producer)];
            if (producer.kernel == nullptr || producer.outputs.size() != 1 || !fusing->can_absorb(i, *producer.kernel))
                continue;
            const size_t first = consumer.inputs.size();
            fusing->absorb(i, std::move(producer.kernel), first);
            consumer.inputs[i] = -1;
            consumer.inputs.insert(consumer.inputs.end(), producer.inputs.begin(), producer.inputs.end());
            for (size_t released : producer.released_inputs) consumer.released_inputs.push_back(first + released);
            for (int input : producer.inputs)
                if (input >= 0) values_[input].last_use = std::max(values_[input].last_use, static_cast<int>(s));
            consumer.label = producer.label.substr(0, producer.label.find(" '")) + "+" + consumer.label;
            producer.inputs.clear();
            producer.outputs.clear();
            producer.released_inputs.clear();
            value.last_use = -1;
        }
    }
}

}  // namespace tessera::cpu
