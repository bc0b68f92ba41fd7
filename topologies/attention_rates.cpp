#include "topologies/attention_rates.hpp"

#include <algorithm>
#include <cmath>

namespace smol::topo {

namespace {

constexpr double kFirstSeq = 512;   // the tables' key lengths: 512 · 2^i
constexpr double kFirstDim = 64;    // head dimensions: 64 · 2^j

/// H100 SXM5 80GB, bf16/fp16, batch × sequence = 16k tokens, hidden 2,048 (heads = 2048 / head
/// dim): every point runs ≥ 2,048 query tiles, over 15 waves of the 132 SMs.
///
/// Forward, FlashAttention-2, cuDNN and FlashAttention-3, each mask and head dimension: the
/// FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608, Figure 5),
/// `assets/flash3_fp16_fwd.png` in Dao-AILab/flash-attention 0251105a, read from the bars' labels;
/// one label the legend hides (FlashAttention-3, no mask, head dim 256, 1k) read from the bar's
/// height against the five labelled bars of its series (linear in pixels to ±1 TFLOP/s): 627.
/// Backward, without a mask, head dimensions 64 and 128: the same paper's Figure 6, which is not in
/// the repository; its labels as transcribed from the paper (FlashAttention-3's from a second
/// transcription, whose FlashAttention-2 and cuDNN labels are the first's, label for label).
/// Checked against a figure that is: FlashAttention-2's unmasked forward + backward from these
/// rows (3.5 / (1/fwd + 2.5/bwd)) is within 5.4 % of `assets/flash2_h100_fwd_bwd_benchmark.png`
/// at every length. FlashAttention-3's forward rows against a measurement in text: pytorch/benchmark
/// ff65cb6 (its flash_v3 at the paper's sizes, head dim 128, no mask: 430, 517, 566, 590, 614, 621
/// TFLOP/s) is 4–10 % below them (tests/topologies/test_attention_rates.cpp).
///
/// Derived, not measured:
///  * backward under the causal mask = backward without it × the forward's causal / unmasked
///    ratio at the same point (the mask skips the same blocks in both passes, and costs the same
///    imbalance). Checked on FlashAttention-2, whose causal forward + backward the repository
///    measures separately (`assets/flash2_h100_fwd_bwd_benchmark.png`, the FlashAttention-2
///    paper's H100 run): the derived rates come within 12 % of it at every length, 8 % from 1k
///    on (tests/topologies/test_attention_rates.cpp);
///  * backward at head dimension 256 = at 128 (no backward was published at 256).
AttentionRates h100_sxm5() {
    AttentionRates t;
    t.name = "h100-sxm5";
    t.sms = 132;   // NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs on the SXM5 part
    const int flash = static_cast<int>(AttentionBackend::flash), fused = static_cast<int>(AttentionBackend::fused),
              flash3 = static_cast<int>(AttentionBackend::flash3);
    auto set = [&](int backend, bool backward, bool causal, int dim, std::initializer_list<double> v) {
        std::copy(v.begin(), v.end(), t.tflops[backend][backward][causal][dim]);
    };
    // Forward, causal: head dim 64, 128, 256.
    set(flash, false, true, 0, {180, 229, 262, 284, 295, 299});
    set(flash, false, true, 1, {191, 260, 298, 319, 333, 335});
    set(flash, false, true, 2, {208, 251, 278, 293, 297, 298});
    set(fused, false, true, 0, {225, 288, 334, 363, 379, 388});
    set(fused, false, true, 1, {315, 410, 484, 518, 529, 539});
    set(fused, false, true, 2, {308, 391, 450, 483, 497, 509});
    set(flash3, false, true, 0, {197, 265, 371, 420, 460, 473});
    set(flash3, false, true, 1, {292, 423, 521, 579, 602, 616});
    set(flash3, false, true, 2, {286, 427, 537, 612, 628, 642});
    // Forward, no mask.
    set(flash, false, false, 0, {282, 306, 318, 321, 322, 324});
    set(flash, false, false, 1, {309, 350, 362, 366, 370, 370});
    set(flash, false, false, 2, {275, 313, 321, 323, 324, 326});
    set(fused, false, false, 0, {335, 373, 395, 408, 412, 413});
    set(fused, false, false, 1, {497, 574, 617, 609, 600, 595});
    set(fused, false, false, 2, {470, 546, 580, 581, 580, 581});
    set(flash3, false, false, 0, {333, 392, 460, 476, 496, 497});
    set(flash3, false, false, 1, {467, 565, 625, 638, 646, 648});
    set(flash3, false, false, 2, {482, 627, 707, 736, 746, 756});
    // Backward, no mask: head dim 64, 128.
    set(flash, true, false, 0, {198, 238, 264, 279, 287, 291});
    set(flash, true, false, 1, {214, 260, 291, 310, 318, 322});
    set(fused, true, false, 0, {266, 348, 395, 417, 432, 433});
    set(fused, true, false, 1, {305, 408, 465, 499, 518, 516});
    set(flash3, true, false, 0, {272, 363, 422, 453, 472, 474});
    set(flash3, true, false, 1, {316, 424, 501, 542, 559, 561});
    for (int b : {flash, fused, flash3}) {
        std::copy_n(t.tflops[b][1][0][1], AttentionRates::kSeqs, t.tflops[b][1][0][2]);
        for (int dim = 0; dim < AttentionRates::kDims; ++dim)
            for (int i = 0; i < AttentionRates::kSeqs; ++i)
                t.tflops[b][1][1][dim][i] =
                    t.tflops[b][1][0][dim][i] * t.tflops[b][0][1][dim][i] / t.tflops[b][0][0][dim][i];
    }
    return t;
}

/// A100 SXM4 80GB, FlashAttention-2 only (cuDNN's fused attention was not measured there), same
/// set-up as the H100's: `assets/flash2_a100_fwd_bwd_benchmark.png` in Dao-AILab/flash-attention
/// 0251105a (the FlashAttention-2 paper's A100 figure), forward + backward, causal and unmasked,
/// head dimensions 64 and 128, read from the bars' labels (two labels the legend hides, unmasked
/// head dim 64 at 1k and 128 at 512, read from the bars' heights against the axis: 153 and 151).
/// Only the pair's combined rate is published: forward and backward each run at it, so their sum
/// is the measured time (the split between them is not; under full recompute the forward that
/// runs again is priced at the pair's rate). Head dimension 256: at 128.
AttentionRates a100_sxm4() {
    AttentionRates t;
    t.name = "a100-sxm4";
    t.sms = 108;   // NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs
    const int flash = static_cast<int>(AttentionBackend::flash);
    auto set = [&](bool causal, int dim, std::initializer_list<double> v) {
        for (bool backward : {false, true}) std::copy(v.begin(), v.end(), t.tflops[flash][backward][causal][dim]);
    };
    set(true, 0, {88, 119, 140, 156, 165, 171});
    set(true, 1, {99, 133, 155, 173, 182, 189});
    set(false, 0, {132, 153, 162, 171, 175, 176});
    set(false, 1, {151, 173, 187, 196, 201, 203});
    for (bool backward : {false, true})
        for (bool causal : {false, true})
            std::copy_n(t.tflops[flash][backward][causal][1], AttentionRates::kSeqs, t.tflops[flash][backward][causal][2]);
    return t;
}

/// One curve at `kv` keys (TFLOP/s).
double along_keys(const double (&r)[AttentionRates::kSeqs], double kv) {
    const double x = std::log2(std::max(kv, 1.0) / kFirstSeq);
    if (x >= AttentionRates::kSeqs - 1) return r[AttentionRates::kSeqs - 1];
    if (x >= 0) {
        const int i = std::min(static_cast<int>(x), AttentionRates::kSeqs - 2);
        const double f = x - i;
        return r[i] + (r[i + 1] - r[i]) * f;
    }
    // Below the first point: r ∝ kv / (kv + h) through the first two, r1 / r0 = 2(512 + h) / (1024 + h).
    const double rho = r[1] / r[0];
    const double h = rho > 1 && rho < 2 ? kFirstSeq * 2 * (rho - 1) / (2 - rho) : 0;
    return r[0] * (kv / (kv + h)) / (kFirstSeq / (kFirstSeq + h));
}

}  // namespace

FlopRate AttentionRates::rate(AttentionBackend backend, bool backward, bool causal, double head_dim, double kv) const {
    const auto& curves = tflops[static_cast<int>(backend)][backward][causal];
    const double y = std::clamp(std::log2(std::max(head_dim, 1.0) / kFirstDim), 0.0, static_cast<double>(kDims - 1));
    const int j = std::min(static_cast<int>(y), kDims - 2);
    const double f = y - j;
    const double lo = along_keys(curves[j], kv), hi = along_keys(curves[j + 1], kv);
    return FlopRate::tflops(lo + (hi - lo) * f);
}

namespace {
/// Every built-in table, by name.
const std::vector<AttentionRates>& tables() {
    static const std::vector<AttentionRates> all{a100_sxm4(), h100_sxm5()};
    return all;
}
}  // namespace

const AttentionRates* attention_rates(const std::string& name) {
    for (const AttentionRates& t : tables())
        if (t.name == name) return &t;
    return nullptr;
}

std::vector<std::string> attention_rate_names() {
    std::vector<std::string> names;
    for (const AttentionRates& t : tables()) names.push_back(t.name);
    return names;
}

}  // namespace smol::topo
