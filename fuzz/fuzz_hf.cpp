// Fuzzes the HuggingFace config.json reader (GPT-2 and Llama keys, told apart by their keys):
// inputs that are not a JSON object with HuggingFace keys are skipped, so the fuzzer spends its
// time in the readers. A model or a smol::Error are the only answers. Seeds: fuzz/corpus/hf;
// dictionary: fuzz/hf.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/model.hpp"

using namespace smol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const Json doc = parse_json_text(text, "config.json");
        if (!doc.is_object() || doc.contains("kind")) return -1;   // smolcluster's own format: fuzz_model's
        const Model m = model_from_json(JsonView(doc, "config.json"), "hf");
        (void)m.parameters();
        if (m.shape().layers <= 256) {
            Workload w;
            w.seq = std::min(m.shape().max_seq, 64);
            for (int tp : {1, 2}) {
                w.tp = tp;
                try {
                    (void)m.blocks(w);
                } catch (const Error&) {
                    // tp 2 need not divide the heads
                }
            }
        }
    } catch (const Error&) {
    }
    return 0;
}
