// CNN and MLP presets against the published parameter counts (torchvision's model cards, which
// match the papers) and ResNet-50's published forward cost (≈ 4.1 GMACs per 224×224 image,
// He et al. 2016 Table 1: 3.8 × 10⁹ FLOPs counted as multiply-adds for v1; torchvision v1.5
// reports 4.09 GFLOPS, i.e. GMACs).
#include <catch2/catch.hpp>

#include "core/cnn_presets.hpp"
#include "core/error.hpp"
#include "core/model.hpp"

using namespace smol;

namespace {
double fwd_flops(const Model& m) {
    double f = 0;
    for (const auto& l : m.layers()) f += l.fwd_flops.count();
    return f;
}
}  // namespace

TEST_CASE("CNN presets have the published parameter counts", "[core][cnn]") {
    const auto [name, published] = GENERATE(table<std::string, double>({{"resnet50", 25.557032e6},
                                                                        {"resnet101", 44.549160e6},
                                                                        {"vgg16", 138.357544e6},
                                                                        {"alexnet", 61.100840e6},
                                                                        {"inception-v3", 23.834568e6}}));
    const Model m = model_preset(name);
    INFO(name << ": " << m.parameters());
    CHECK_FALSE(m.is_transformer());
    CHECK(static_cast<double>(m.parameters()) == Approx(published).epsilon(0.01));
    CHECK(load_model(name).parameters() == m.parameters());
}

TEST_CASE("ResNet-50 forward costs about 4.1 GMACs (8.2 GFLOPs) per image", "[core][cnn]") {
    const Model m = model_preset("resnet50");
    CHECK(fwd_flops(m) == Approx(2 * 4.1e9).epsilon(0.05));
    // The first convolution by hand: 7·7·3·64 weights applied at 112·112 positions.
    const LayerSpec& conv1 = m.layers().front();
    CHECK(conv1.name == "conv1");
    CHECK(conv1.fwd_flops.count() == 2.0 * 7 * 7 * 3 * 64 * 112 * 112);
    CHECK(conv1.params == 7 * 7 * 3 * 64 + 2 * 64);
    CHECK(conv1.output == Bytes(64 * 112 * 112 * 4));
    // The classifier sees a 2048-vector.
    const LayerSpec& fc = m.layers().back();
    CHECK(fc.params == 2048 * 1000 + 1000);
    CHECK(fc.activations == Bytes(2048 * 4));
}

TEST_CASE("VGG-16 and Inception-v3 run at their input sizes", "[core][cnn]") {
    // VGG-16: 15.5 GMACs per 224×224 image (Simonyan & Zisserman; torchvision 15.47 GFLOPS).
    CHECK(fwd_flops(model_preset("vgg16")) == Approx(2 * 15.47e9).epsilon(0.05));
    // Inception-v3 at 299×299: 5.7 GMACs (torchvision 5.71 GFLOPS).
    const Model inc = model_preset("inception-v3");
    CHECK(fwd_flops(inc) == Approx(2 * 5.71e9).epsilon(0.05));
    CHECK(inc.input_bytes_per_sample() == 3 * 299 * 299 * 4);
    CHECK(inc.layers().back().activations == Bytes(2048 * 4));
}

TEST_CASE("AlexNet (one-tower, torchvision) has its exact parameters and 0.71 GMACs", "[core][cnn]") {
    // torchvision's AlexNet_Weights.IMAGENET1K_V1 lists num_params 61,100,840 and 0.71 GFLOPS
    // (multiply-adds). By hand: conv1 11·11·3·64 + 64 at 55×55, conv2 5·5·64·192 + 192 at 27×27,
    // conv3-5 3×3 at 13×13, then 256·6·6 = 9216 inputs to fc6.
    const Model m = model_preset("alexnet");
    CHECK(m.parameters() == 61'100'840);
    CHECK(fwd_flops(m) == Approx(2 * 0.714e9).epsilon(0.01));
    const LayerSpec& conv1 = m.layers().front();
    CHECK(conv1.params == 11 * 11 * 3 * 64 + 64);
    CHECK(conv1.output == Bytes(64 * 55 * 55 * 4));
    std::int64_t fc = 0;
    for (const auto& l : m.layers())
        if (l.kind == "fc") fc += l.params;
    CHECK(fc == (9216 * 4096 + 4096) + (4096 * 4096 + 4096) + (4096 * 1000 + 1000));
    CHECK(m.layers()[m.layers().size() - 3].activations == Bytes(9216 * 4));
}

TEST_CASE("MLP presets are fully connected stacks", "[core][cnn]") {
    const Model s = model_preset("mlp-small");
    CHECK(s.parameters() == (784 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 10 + 10));
    const Model l = model_preset("mlp-large");
    CHECK(l.parameters() > 50 * s.parameters());
    for (const auto& layer : l.layers()) CHECK(layer.fwd_flops.count() == 2.0 * static_cast<double>(layer.params - layer.output.count() / 4));
}

TEST_CASE("layer-list presets are listed and blocks scale with the micro-batch", "[core][cnn]") {
    const auto names = model_preset_names();
    for (const char* n : {"alexnet", "resnet50", "resnet101", "vgg16", "inception-v3", "mlp-small", "mlp-large"})
        CHECK(std::find(names.begin(), names.end(), n) != names.end());
    CHECK(std::is_sorted(names.begin(), names.end()));
    CHECK_FALSE(cnn_preset("gpt2-small").has_value());
    const Model m = model_preset("resnet50");
    Workload w;
    w.micro_batch = 8;
    w.dtype = DType::fp32;
    const auto blocks = m.blocks(w);
    REQUIRE(blocks.size() == m.layers().size());
    CHECK(blocks[0].fwd.count() == 8 * m.layers()[0].fwd_flops.count());
}
