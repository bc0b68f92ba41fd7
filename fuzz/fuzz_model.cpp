// Fuzzes the model reader with smolcluster's own model JSON (transformer and layer list): any
// input either gives a model whose parameters and blocks are computed without a crash, an
// overflow or a hang, or a smol::Error. Anything else (another exception, a sanitizer report)
// is a finding. Seeds: fuzz/corpus/model; dictionary: fuzz/model.dict.
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
        const Json doc = parse_json_text(text, "fuzz.json");
        const Model m = model_from_json(JsonView(doc, "fuzz.json"), "fuzz");
        (void)m.parameters();
        // Blocks for a small workload: one sample at a short sequence (every layer's arithmetic).
        if (m.is_transformer() ? m.shape().layers <= 256 : m.layers().size() <= 256) {
            Workload w;
            w.seq = m.is_transformer() ? std::min(m.shape().max_seq, 64) : 0;
            (void)m.blocks(w);
            (void)m.flops_per_iteration(8, w.seq == 0 ? 1 : w.seq, Recompute::full);
            if (m.is_transformer()) {   // and its linear layers in FP8 (Transformer Engine's casts and copies)
                w.fp8 = Fp8Recipe::tensorwise;
                (void)m.blocks(w);
                w.fp8_bf16_first = w.fp8_bf16_last = 1;   // and its first and last layers in 16 bits
                (void)m.blocks(w);
            }
        }
    } catch (const Error&) {
        // A clear error is the expected answer to bad input.
    }
    return 0;
}
