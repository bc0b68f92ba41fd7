// The built-in fused attention rates: the measured points as published, the interpolation rules
// by hand, and the derived rows checked against a measurement they were not derived from.
#include <catch2/catch.hpp>

#include <cmath>

#include "topologies/attention_rates.hpp"

using namespace smol;
using namespace smol::topo;
using Catch::Detail::Approx;

namespace {
const AttentionRates& h100() {
    const AttentionRates* t = attention_rates("h100-sxm5");
    REQUIRE(t != nullptr);
    return *t;
}
double tf(AttentionBackend b, bool backward, bool causal, double d, double kv) {
    return h100().rate(b, backward, causal, d, kv).to_tflops();
}
constexpr auto flash = AttentionBackend::flash;
constexpr auto fused = AttentionBackend::fused;
constexpr auto flash3 = AttentionBackend::flash3;
}  // namespace

TEST_CASE("attention rates: the FlashAttention-3 paper's H100 points, as published", "[topologies][attention]") {
    CHECK(attention_rates("h100") == nullptr);
    CHECK(h100().sms == 132);
    // Figure 5 (d): causal forward, head dim 128 — cuDNN 315 … 539, FlashAttention-2 191 … 335.
    CHECK(tf(fused, false, true, 128, 512) == Approx(315));
    CHECK(tf(fused, false, true, 128, 8192) == Approx(529));
    CHECK(tf(flash, false, true, 128, 16384) == Approx(335));
    // (a) unmasked, head dim 64; (e) unmasked, 256; (b), (f) causal.
    CHECK(tf(fused, false, false, 64, 2048) == Approx(395));
    CHECK(tf(flash, false, false, 256, 1024) == Approx(313));
    CHECK(tf(fused, false, true, 256, 4096) == Approx(483));
    CHECK(tf(flash, false, true, 64, 512) == Approx(180));
    // Figure 6: unmasked backward, head dims 64 and 128.
    CHECK(tf(fused, true, false, 128, 8192) == Approx(518));
    CHECK(tf(flash, true, false, 64, 16384) == Approx(291));
}

TEST_CASE("attention rates: between, beyond and below the measured points", "[topologies][attention]") {
    // Linear in log2(keys): 3,072 keys is not the midpoint of log2 2k … 4k; 2^11.5 = 2,896 is.
    CHECK(tf(fused, false, true, 128, std::pow(2.0, 11.5)) == Approx((484 + 518) / 2.0));
    // Linear in log2(head dim): 2^6.5 ≈ 90.5 halfway between 64 and 128.
    CHECK(tf(fused, false, true, std::pow(2.0, 6.5), 8192) == Approx((379 + 529) / 2.0));
    // Beyond 16k keys and outside 64 … 256 the nearest point.
    CHECK(tf(fused, false, true, 128, 131072) == Approx(539));
    CHECK(tf(fused, false, true, 32, 8192) == Approx(379));
    CHECK(tf(fused, false, true, 512, 8192) == Approx(497));
    // Below 512 keys: r ∝ kv / (kv + h) through (512, 315) and (1024, 410):
    // 410/315 = 2(512 + h)/(1024 + h) → h = 1024 · (410/315 − 1) / (2 − 410/315) = 442.2.
    const double rho = 410.0 / 315, h = 1024 * (rho - 1) / (2 - rho);
    CHECK(h == Approx(442.2).epsilon(1e-3));
    CHECK(tf(fused, false, true, 128, 256) == Approx(315 * (256 / (256 + h)) / (512 / (512 + h))));
    CHECK(tf(fused, false, true, 128, 256) == Approx(215.2).epsilon(2e-3));
    // Backward at head dim 256 was not measured: the 128 row's.
    CHECK(tf(flash, true, false, 256, 4096) == Approx(310));
}

TEST_CASE("attention rates: the derived causal backward against FlashAttention-2's own H100 measurement",
          "[topologies][attention]") {
    // Causal backward = unmasked backward × the forward's causal / unmasked ratio, by hand at one point:
    CHECK(tf(fused, true, true, 128, 8192) == Approx(518.0 * 529 / 600));
    // The check it was not derived from: FlashAttention-2's causal forward + backward on the H100 SXM5
    // (Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png, panels (c), (d)), TFLOP/s
    // counted as 3.5 × the forward's FLOPs over both kernels' time.
    const double seqs[] = {512, 1024, 2048, 4096, 8192, 16384};
    const double measured64[] = {141, 192, 232, 257, 273, 284};
    const double measured128[] = {163, 221, 265, 294, 308, 328};
    for (int i = 0; i < 6; ++i) {
        for (int d : {64, 128}) {
            const double fwd = tf(flash, false, true, d, seqs[i]), bwd = tf(flash, true, true, d, seqs[i]);
            const double both = 3.5 / (1 / fwd + 2.5 / bwd);
            const double measured = d == 64 ? measured64[i] : measured128[i];
            INFO("head dim " << d << ", " << seqs[i] << " keys: derived " << both << " TFLOP/s, measured " << measured);
            CHECK(std::abs(both / measured - 1) < (i == 0 ? 0.12 : 0.08));
        }
    }
    // And unmasked (panels (a), (b)), where both figures were measured: the two papers agree.
    const double unmasked128[] = {248, 294, 320, 326, 335, 338};
    for (int i = 0; i < 6; ++i) {
        const double fwd = tf(flash, false, false, 128, seqs[i]), bwd = tf(flash, true, false, 128, seqs[i]);
        INFO(seqs[i] << " keys");
        CHECK(std::abs(3.5 / (1 / fwd + 2.5 / bwd) / unmasked128[i] - 1) < 0.06);
    }
}

TEST_CASE("attention rates: the A100's FlashAttention-2, forward and backward at their pair's measured rate", "[topologies][attention]") {
    const AttentionRates* a100 = attention_rates("a100-sxm4");
    REQUIRE(a100 != nullptr);
    CHECK(a100->sms == 108);
    CHECK(a100->has(flash));
    CHECK_FALSE(a100->has(fused));   // cuDNN was not measured there
    CHECK_FALSE(a100->has(flash3));  // nor FlashAttention-3, which runs on Hopper alone
    CHECK(h100().has(fused));
    CHECK(h100().has(flash3));
    // FlashAttention-2 paper, A100 forward + backward, panel (d): causal, head dim 128, 182 TFLOP/s at 8k.
    const double f = a100->rate(flash, false, true, 128, 8192).to_tflops(), b = a100->rate(flash, true, true, 128, 8192).to_tflops();
    CHECK(f == Approx(182));
    // A forward of F FLOPs and its backward of 2.5 F take 3.5 F / 182 TFLOP/s: the measured pair.
    CHECK(3.5 / (1 / f + 2.5 / b) == Approx(182));
    CHECK(a100->rate(flash, true, false, 64, 16384).to_tflops() == Approx(176));
    CHECK(a100->rate(flash, false, false, 256, 2048).to_tflops() == Approx(187));   // 256: the 128 row
}

TEST_CASE("attention rates: FlashAttention-3 on the H100, as published and against a benchmark in text", "[topologies][attention]") {
    // Figure 5, the purple bars: (c) unmasked and (d) causal at head dim 128, (a) unmasked at 64,
    // (f) causal at 256, and (e)'s 1k bar, whose label the legend hides (read from its height: 627).
    CHECK(tf(flash3, false, false, 128, 512) == Approx(467));
    CHECK(tf(flash3, false, true, 128, 8192) == Approx(602));
    CHECK(tf(flash3, false, false, 64, 16384) == Approx(497));
    CHECK(tf(flash3, false, true, 256, 4096) == Approx(612));
    CHECK(tf(flash3, false, false, 256, 1024) == Approx(627));
    // Figure 6: unmasked backward, head dims 64 and 128.
    CHECK(tf(flash3, true, false, 64, 2048) == Approx(422));
    CHECK(tf(flash3, true, false, 128, 16384) == Approx(561));
    // Derived as the other libraries' rows: the causal backward by the forward's causal / unmasked
    // ratio, head dim 256's backward at 128's.
    CHECK(tf(flash3, true, true, 128, 4096) == Approx(542.0 * 579 / 638));
    CHECK(tf(flash3, true, false, 256, 8192) == Approx(559));
    // From 1k keys on, in both passes: ahead of FlashAttention-2, and ahead of cuDNN or within 10
    // TFLOP/s of it (565 against 574 at head dim 128 and 1k), as the figures show.
    for (double kv : {1024.0, 2048.0, 4096.0, 8192.0, 16384.0})
        for (int d : {64, 128})
            for (bool backward : {false, true}) {
                INFO(kv << " keys, head dim " << d << (backward ? ", backward" : ", forward"));
                CHECK(tf(flash3, backward, false, d, kv) > tf(fused, backward, false, d, kv) - 10);
                CHECK(tf(flash3, backward, false, d, kv) > tf(flash, backward, false, d, kv));
            }
    // A measurement in text that the table was not read from: pytorch/benchmark ff65cb6 ("Fix
    // dimension order for FlashAttention-3", run_benchmark.py triton --op flash_attention
    // --only flash_v3 --d-head 128 at the paper's sizes, batch × seq 16k, 16 heads), unmasked
    // forward: 430, 517, 566, 590, 614, 621 TFLOP/s. The paper's figure is 4–10 % above it at
    // every length.
    const double seqs[] = {512, 1024, 2048, 4096, 8192, 16384};
    const double benchmark[] = {430.32, 517.099, 565.544, 590.233, 614.234, 620.73};
    for (int i = 0; i < 6; ++i) {
        const double ratio = tf(flash3, false, false, 128, seqs[i]) / benchmark[i];
        INFO(seqs[i] << " keys: table / benchmark " << ratio);
        CHECK(ratio > 1.04);
        CHECK(ratio < 1.11);
    }
}
