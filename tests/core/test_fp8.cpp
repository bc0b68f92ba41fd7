// FP8 linear layers as Transformer Engine runs them: each linear's input cast to FP8 with its
// transpose before an FP8 GEMM, the incoming gradient cast the same way before the FP8 data and
// weight gradients, the inputs kept for backward in one byte. Expected values are worked out here
// from the shapes, not from transformer.cpp's construction.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/kernel.hpp"
#include "core/model.hpp"
#include "test_support.hpp"

using namespace smol;

namespace {

std::vector<Kernel> fp8_linear(std::int64_t m, std::int64_t n, std::int64_t k, Fp8Recipe r) {
    std::vector<Kernel> out = quantize_kernels(m * k, 2, true, r);
    out.push_back(fp8_gemm_kernel(KernelName::qkv, KernelClass::gemm, m, n, k, 1, 2, true, r));
    return out;
}

/// A GPT a test builds quickly: GPT-2 medium, 24 layers of 1024, 16 heads.
Model small_gpt() { return model_preset("gpt2-medium"); }

}  // namespace

TEST_CASE("an FP8 GEMM reads one byte per operand element and writes the training dtype", "[core][kernel][fp8]") {
    const Kernel g = fp8_gemm_kernel(KernelName::mlp_up, KernelClass::gemm, 1024, 3072, 1024, 1, 2, true, Fp8Recipe::delayed);
    CHECK(g.op == KernelOp::gemm);
    CHECK(g.fp8 == Fp8Recipe::delayed);
    CHECK(g.flops == 2.0 * 1024 * 3072 * 1024);
    CHECK(g.bytes == (1024LL * 1024 + 1024LL * 3072) * 1 + 1024LL * 3072 * 2);
    CHECK(g.weight);
}

TEST_CASE("a cast to FP8: one pass under delayed scaling, an amax pass before it under tensorwise", "[core][kernel][fp8]") {
    // Delayed: read 2 bytes, write the FP8 copy and its transpose.
    const auto d = quantize_kernels(1000, 2, true, Fp8Recipe::delayed);
    REQUIRE(d.size() == 1);
    CHECK(d[0].name == KernelName::quantize);
    CHECK(d[0].bytes == 1000 * 4);
    // Without the transpose, one FP8 byte.
    CHECK(quantize_kernels(1000, 2, false, Fp8Recipe::delayed)[0].bytes == 1000 * 3);
    // Tensorwise (current scaling): the amax reads the tensor first.
    const auto t = quantize_kernels(1000, 2, true, Fp8Recipe::tensorwise);
    REQUIRE(t.size() == 2);
    CHECK(t[0].bytes == 1000 * 2);
    CHECK(t[1].bytes == 1000 * 4);
}

TEST_CASE("an FP8 linear's backward: the gradient cast, then FP8 data and weight gradients, the forward cast none", "[core][kernel][fp8]") {
    const std::int64_t m = 2048, n = 3072, k = 1024;
    const std::vector<Kernel> fwd = fp8_linear(m, n, k, Fp8Recipe::delayed);
    const std::vector<Kernel> bwd = backward_kernels(fwd);
    REQUIRE(bwd.size() == 3);
    // dC (m × n) cast with its transpose: read 2 bytes, write 2.
    CHECK(bwd[0].name == KernelName::quantize);
    CHECK(bwd[0].bytes == m * n * 4);
    // dA = dC·Bᵀ: m × k over n; dB = Aᵀ·dC: k × n over m — both FP8, the forward's FLOPs each.
    CHECK(bwd[1].fp8 == Fp8Recipe::delayed);
    CHECK((bwd[1].m == m && bwd[1].n == k && bwd[1].k == n));
    CHECK_FALSE(bwd[1].weight);
    CHECK(bwd[2].fp8 == Fp8Recipe::delayed);
    CHECK((bwd[2].m == k && bwd[2].n == n && bwd[2].k == m));
    CHECK(bwd[2].weight);
    CHECK(bwd[1].flops == fwd.back().flops);
    CHECK(bwd[2].flops == fwd.back().flops);
    // Tensorwise casts the gradient after its amax: two kernels.
    CHECK(backward_kernels(fp8_linear(m, n, k, Fp8Recipe::tensorwise)).size() == 4);
    // A zero-bubble weight pass reuses the input pass's cast: only dB.
    const std::vector<Kernel> w = backward_kernels(fwd, BackwardPart::weight);
    REQUIRE(w.size() == 1);
    CHECK(w[0].weight);
    CHECK(backward_kernels(fwd, BackwardPart::input).size() == 2);
}

TEST_CASE("an FP8 layer: its four linears in FP8 after their casts, attention, norms and the head 16-bit", "[core][model][fp8]") {
    const Model m = small_gpt();
    const TransformerShape& s = m.shape();
    const std::int64_t h = s.hidden, t = 2, tokens = 2 * 1024;
    Workload w;
    w.micro_batch = 2;
    w.tp = static_cast<int>(t);
    w.attention = Attention::flash;
    const std::vector<Block> plain = m.blocks(w);
    // The kernel before each FP8 GEMM, and the GEMMs' names, under a recipe.
    auto before_fp8 = [&](Fp8Recipe r, bool sp, std::vector<KernelName>& gemms) {
        Workload x = w;
        x.fp8 = r;
        x.sequence_parallel = sp;
        std::vector<Kernel> out;
        const Block layer = m.blocks(x)[1];
        for (std::size_t i = 0; i < layer.fwd_kernels.size(); ++i) {
            if (layer.fwd_kernels[i].fp8 == Fp8Recipe::none) continue;
            gemms.push_back(layer.fwd_kernels[i].name);
            REQUIRE(i > 0);
            out.push_back(layer.fwd_kernels[i - 1]);
        }
        return out;
    };
    const std::vector<KernelName> four{KernelName::qkv, KernelName::attn_proj, KernelName::mlp_up, KernelName::mlp_down};
    // Tensorwise: every GEMM's input cast on its own, m × k elements, 2 bytes read, 2 written (the
    // FP8 copy and its transpose). After a norm (QKV, first MLP) the norm found the amax as it wrote
    // (TE's FUSED_NORM_AMAX_FP8): the cast follows it directly; elsewhere an amax pass (2 bytes an
    // element) comes first.
    std::vector<KernelName> names;
    const std::vector<Kernel> cur = before_fp8(Fp8Recipe::tensorwise, false, names);
    CHECK(names == four);
    for (const Kernel& c : cur) CHECK(c.name == KernelName::quantize);
    CHECK(cur[0].bytes == tokens * h * 4);
    CHECK(cur[1].bytes == tokens * h / t * 4);
    {
        Workload x = w;
        x.fp8 = Fp8Recipe::tensorwise;
        const std::vector<Block> blocks = m.blocks(x);
        const std::vector<Kernel>& fk = blocks[1].fwd_kernels;
        std::vector<std::size_t> at;
        for (std::size_t i = 0; i < fk.size(); ++i)
            if (fk[i].fp8 != Fp8Recipe::none) at.push_back(i);
        REQUIRE(at.size() == 4);
        CHECK(fk[at[0] - 2].name == KernelName::norm);       // norm, cast, QKV
        CHECK(fk[at[1] - 2].name == KernelName::quantize);   // amax, cast, output projection
        CHECK(fk[at[1] - 2].bytes == tokens * h / t * 2);
        CHECK(fk[at[2] - 2].name == KernelName::norm);       // norm, cast, first MLP projection
    }
    // Under sequence parallelism the cast after the norm runs on the rank's tokens/t, before the
    // gather, and writes the FP8 copy alone: 2 bytes read, 1 written.
    names.clear();
    CHECK(before_fp8(Fp8Recipe::tensorwise, true, names)[0].bytes == tokens / t * h * 3);
    // Delayed: the QKV and first MLP projections are TE's LayerNormLinear, whose norm writes the
    // FP8 copy and its transpose (2 bytes read, 1 + 1 written: the 16-bit norm's traffic); the
    // output and down projections' inputs are cast: tokens × h/t and tokens × 4h/t elements.
    names.clear();
    const std::vector<Kernel> del = before_fp8(Fp8Recipe::delayed, false, names);
    CHECK(names == four);
    REQUIRE(del.size() == 4);
    CHECK(del[0].name == KernelName::norm);
    CHECK(del[0].bytes == tokens * h * 4);
    CHECK(del[2].name == KernelName::norm);
    CHECK(del[1].name == KernelName::quantize);
    CHECK(del[1].bytes == tokens * h / t * 4);
    CHECK(del[3].name == KernelName::quantize);
    CHECK(del[3].bytes == tokens * 4 * h / t * 4);
    // With sequence parallelism the norm runs on the rank's tokens/t and writes the FP8 copy alone,
    // which is gathered (its transpose for the weight gradient comes in backward): 2 bytes read, 1 written.
    names.clear();
    const std::vector<Kernel> sp = before_fp8(Fp8Recipe::delayed, true, names);
    CHECK(sp[0].name == KernelName::norm);
    CHECK(sp[0].bytes == tokens / t * h * 3);
    w.fp8 = Fp8Recipe::delayed;
    const std::vector<Block> fp8 = m.blocks(w);
    const Block& layer = fp8[1];
    // GPT's four weight matrices hold 12h² parameters, split over the tensor ranks.
    CHECK(layer.fp8_params == 12 * h * h / t);
    CHECK(plain[1].fp8_params == 0);
    // Model FLOPs do not change; the head's logits GEMM stays 16-bit.
    CHECK(layer.fwd.count() == plain[1].fwd.count());
    for (const Kernel& k : fp8.back().fwd_kernels) CHECK(k.fp8 == Fp8Recipe::none);
    CHECK(fp8.back().fp8_params == 0);
}

TEST_CASE("FP8 keeps each linear's input in one byte (Korthikanti's 16-bit terms less one byte each)", "[core][model][fp8]") {
    // GPT-3 175B at s = 2048, b = 1, tp 8, no sp. The linears' inputs: QKV's and the MLP's (the
    // norm outputs, sbh each, replicated), the output projection's (sbh/t) and the down
    // projection's (the activation's output, 4sbh/t). In 16-bit each is 2 bytes per element.
    const Model m = model_preset("gpt3-175b");
    const double sbh = 2048.0 * 12288, t = 8;
    auto bytes = [&](Attention a, Fp8Recipe r) {
        Workload w;
        w.tp = static_cast<int>(t);
        w.attention = a;
        w.fp8 = r;
        return m.blocks(w)[1].activations.as_double();
    };
    // Eager: every one of them drops a byte per element: sbh(2 + 5/t).
    CHECK(bytes(Attention::eager, Fp8Recipe::none) - bytes(Attention::eager, Fp8Recipe::delayed) == Approx(sbh * (2 + 5 / t)));
    // Flash keeps its 16-bit output O for its own backward beside the projection's FP8 copy of it:
    // sbh(2 + 4/t) saved, sbh/t more kept.
    CHECK(bytes(Attention::flash, Fp8Recipe::none) - bytes(Attention::flash, Fp8Recipe::delayed) == Approx(sbh * (2 + 3 / t)));
    // Full recompute keeps only the layer's input, in the training dtype either way.
    Workload full;
    full.tp = 8;
    full.recompute = Recompute::full;
    const double plain = m.blocks(full)[1].activations.as_double();
    full.fp8 = Fp8Recipe::tensorwise;
    CHECK(m.blocks(full)[1].activations.as_double() == plain);
}

TEST_CASE("FP8 recipe names (--fp8)", "[core][model][fp8]") {
    CHECK(parse_fp8_recipe("delayed", {}) == Fp8Recipe::delayed);
    CHECK(parse_fp8_recipe("tensorwise", {}) == Fp8Recipe::tensorwise);
    const std::string e = test::bad_input_message([] { parse_fp8_recipe("hybrid", {"", "", "--fp8"}); });
    CHECK_THAT(e, Catch::Contains("--fp8") && Catch::Contains("delayed") && Catch::Contains("tensorwise"));
    CHECK(std::string(to_string(Fp8Recipe::tensorwise)) == "tensorwise");
}
