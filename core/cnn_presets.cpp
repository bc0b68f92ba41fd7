// Layer lists built by walking each architecture: every convolution knows its input size, so
// parameters, FLOPs and activation sizes come from the same arithmetic for every network.
//
// Conventions, per sample, fp32 (LayerSpec's units):
//  * a "conv" layer is convolution + batch norm (+ ReLU): params = k_h·k_w·c_in·c_out (+ c_out
//    bias when the net has conv biases, VGG) + 2·c_out (BN scale and shift, ResNet / Inception);
//  * FLOPs = 2 · MACs of the convolution / linear layer (BN, ReLU, pooling and adds are not
//    counted, as in the published GMAC figures: ResNet-50 ≈ 4.1 GMACs at 224×224);
//  * activations saved for backward = the conv output (BN input) and the BN/ReLU output, 2 ×
//    output elements × 4 bytes; pooling layers save their input; fc layers save their input;
//  * output = output elements × 4 bytes.
#include "core/cnn_presets.hpp"

#include <cstdint>
#include <functional>
#include <map>

namespace smol {
namespace {

constexpr std::int64_t kFloatBytes = 4;

/// A feature map flowing through the network, and the layers emitted so far.
struct Builder {
    Builder(std::int64_t c_, std::int64_t h_, std::int64_t w_) : c(c_), h(h_), w(w_) {}
    std::int64_t c, h, w;
    bool bn = true;          // conv layers carry batch norm (ResNet, Inception)
    bool conv_bias = false;  // conv layers carry a bias (VGG)
    std::vector<LayerSpec> layers;

    static std::int64_t out_dim(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p) {
        return (in + 2 * p - k) / s + 1;
    }

    /// A convolution (+ BN + ReLU) from the current map; returns the output map's shape and
    /// makes it current.
    void conv_rect(const std::string& name, std::int64_t out, std::int64_t kh, std::int64_t kw, std::int64_t s,
                   std::int64_t ph, std::int64_t pw) {
        const std::int64_t ho = out_dim(h, kh, s, ph), wo = out_dim(w, kw, s, pw);
        LayerSpec l;
        l.name = name;
        l.kind = "conv";
        l.params = kh * kw * c * out + (conv_bias ? out : 0) + (bn ? 2 * out : 0);
        l.fwd_flops = Flops(2.0 * static_cast<double>(kh * kw * c * out) * static_cast<double>(ho * wo));
        const std::int64_t elems = out * ho * wo;
        l.activations = Bytes((bn ? 2 : 1) * elems * kFloatBytes);
        l.output = Bytes(elems * kFloatBytes);
        layers.push_back(l);
        c = out;
        h = ho;
        w = wo;
    }
    void conv(const std::string& name, std::int64_t out, std::int64_t k, std::int64_t s = 1, std::int64_t p = 0) {
        conv_rect(name, out, k, k, s, p, p);
    }

    void pool(const std::string& name, std::int64_t k, std::int64_t s, std::int64_t p = 0) {
        LayerSpec l;
        l.name = name;
        l.kind = "pool";
        l.activations = Bytes(c * h * w * kFloatBytes);
        h = out_dim(h, k, s, p);
        w = out_dim(w, k, s, p);
        l.output = Bytes(c * h * w * kFloatBytes);
        layers.push_back(l);
    }

    void global_pool(const std::string& name) { pool(name, h, 1); }

    void fc(const std::string& name, std::int64_t out) {
        const std::int64_t in = c * h * w;
        LayerSpec l;
        l.name = name;
        l.kind = "fc";
        l.params = in * out + out;
        l.fwd_flops = Flops(2.0 * static_cast<double>(in * out));
        l.activations = Bytes(in * kFloatBytes);
        l.output = Bytes(out * kFloatBytes);
        layers.push_back(l);
        c = out;
        h = w = 1;
    }
};

// ---- ResNet (He et al. 2016; torchvision resnet50 / resnet101, v1.5) ---------------------------

Model resnet(const std::string& name, const std::vector<int>& blocks_per_stage) {
    Builder b{3, 224, 224};
    b.conv("conv1", 64, 7, 2, 3);
    b.pool("maxpool", 3, 2, 1);
    std::int64_t width = 64;
    for (std::size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
        for (int i = 0; i < blocks_per_stage[stage]; ++i) {
            const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i) + ".";
            const std::int64_t stride = (i == 0 && stage > 0) ? 2 : 1;
            const std::int64_t in_c = b.c, in_h = b.h, in_w = b.w;
            b.conv(p + "conv1", width, 1);
            b.conv(p + "conv2", width, 3, stride, 1);
            b.conv(p + "conv3", width * 4, 1);  // the residual add and ReLU fold into this layer
            if (i == 0) {
                // Projection shortcut from the block's input.
                Builder d{in_c, in_h, in_w};
                d.conv(p + "downsample", width * 4, 1, stride);
                b.layers.push_back(d.layers.back());
            }
        }
        width *= 2;
    }
    b.global_pool("avgpool");
    b.fc("fc", 1000);
    return Model::layer_list(name, std::move(b.layers), static_cast<int>(3 * 224 * 224 * kFloatBytes));
}

// ---- VGG-16 (Simonyan & Zisserman 2015, configuration D; torchvision vgg16) --------------------

Model vgg16() {
    Builder b{3, 224, 224};
    b.bn = false;
    b.conv_bias = true;
    const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    int conv = 0, pool = 0;
    for (int v : cfg) {
        if (v == 0)
            b.pool("pool" + std::to_string(++pool), 2, 2);
        else
            b.conv("conv" + std::to_string(++conv), v, 3, 1, 1);
    }
    b.fc("fc6", 4096);
    b.fc("fc7", 4096);
    b.fc("fc8", 1000);
    return Model::layer_list("vgg16", std::move(b.layers), static_cast<int>(3 * 224 * 224 * kFloatBytes));
}

// ---- AlexNet, the one-tower variant of Krizhevsky 2014 ("One weird trick for parallelizing
// convolutional neural networks", arXiv:1404.5997), as torchvision builds it (pytorch/vision
// torchvision/models/alexnet.py, whose docstring names that paper as the architecture's source):
// conv 64 11×11/4, 192 5×5, 384, 256, 256 3×3, with biases and no batch norm, three 3×3/2
// max-pools, the 6×6 adaptive average pool (an identity at 224×224), and the classifier of
// Krizhevsky et al. 2012, 9216 → 4096 → 4096 → 1000. 61,100,840 parameters, 96 % of them in fc6-fc8.

Model alexnet() {
    Builder b{3, 224, 224};
    b.bn = false;
    b.conv_bias = true;
    b.conv("conv1", 64, 11, 4, 2);
    b.pool("pool1", 3, 2);
    b.conv("conv2", 192, 5, 1, 2);
    b.pool("pool2", 3, 2);
    b.conv("conv3", 384, 3, 1, 1);
    b.conv("conv4", 256, 3, 1, 1);
    b.conv("conv5", 256, 3, 1, 1);
    b.pool("pool5", 3, 2);
    b.fc("fc6", 4096);
    b.fc("fc7", 4096);
    b.fc("fc8", 1000);
    return Model::layer_list("alexnet", std::move(b.layers), static_cast<int>(3 * 224 * 224 * kFloatBytes));
}

// ---- Inception-v3 (Szegedy et al. 2016; torchvision inception_v3, aux_logits=False) ------------
// Each branch starts from the module's input map; the module's output is the concatenation.

struct Inception {
    Builder& net;
    std::string prefix;
    std::int64_t in_c, in_h, in_w;
    std::int64_t out_c = 0, out_h = 0, out_w = 0;

    Inception(Builder& b, std::string p) : net(b), prefix(std::move(p)), in_c(b.c), in_h(b.h), in_w(b.w) {}

    /// A branch: a sequence of convs (and pools) from the module input.
    void branch(const std::function<void(Builder&)>& body) {
        Builder br{in_c, in_h, in_w};
        body(br);
        for (auto& l : br.layers) {
            l.name = prefix + "." + l.name;
            net.layers.push_back(l);
        }
        out_c += br.c;
        out_h = br.h;
        out_w = br.w;
    }
    void done() {
        net.c = out_c;
        net.h = out_h;
        net.w = out_w;
    }
};

void inception_a(Builder& b, const std::string& name, std::int64_t pool_features) {
    Inception m(b, name);
    m.branch([](Builder& x) { x.conv("branch1x1", 64, 1); });
    m.branch([](Builder& x) { x.conv("branch5x5_1", 48, 1); x.conv("branch5x5_2", 64, 5, 1, 2); });
    m.branch([](Builder& x) {
        x.conv("branch3x3dbl_1", 64, 1);
        x.conv("branch3x3dbl_2", 96, 3, 1, 1);
        x.conv("branch3x3dbl_3", 96, 3, 1, 1);
    });
    m.branch([&](Builder& x) { x.pool("avgpool", 3, 1, 1); x.conv("branch_pool", pool_features, 1); });
    m.done();
}

void inception_b(Builder& b, const std::string& name) {
    Inception m(b, name);
    m.branch([](Builder& x) { x.conv("branch3x3", 384, 3, 2); });
    m.branch([](Builder& x) {
        x.conv("branch3x3dbl_1", 64, 1);
        x.conv("branch3x3dbl_2", 96, 3, 1, 1);
        x.conv("branch3x3dbl_3", 96, 3, 2);
    });
    m.branch([](Builder& x) { x.pool("maxpool", 3, 2); });
    m.done();
}

void inception_c(Builder& b, const std::string& name, std::int64_t c7) {
    Inception m(b, name);
    m.branch([](Builder& x) { x.conv("branch1x1", 192, 1); });
    m.branch([&](Builder& x) {
        x.conv("branch7x7_1", c7, 1);
        x.conv_rect("branch7x7_2", c7, 1, 7, 1, 0, 3);
        x.conv_rect("branch7x7_3", 192, 7, 1, 1, 3, 0);
    });
    m.branch([&](Builder& x) {
        x.conv("branch7x7dbl_1", c7, 1);
        x.conv_rect("branch7x7dbl_2", c7, 7, 1, 1, 3, 0);
        x.conv_rect("branch7x7dbl_3", c7, 1, 7, 1, 0, 3);
        x.conv_rect("branch7x7dbl_4", c7, 7, 1, 1, 3, 0);
        x.conv_rect("branch7x7dbl_5", 192, 1, 7, 1, 0, 3);
    });
    m.branch([](Builder& x) { x.pool("avgpool", 3, 1, 1); x.conv("branch_pool", 192, 1); });
    m.done();
}

void inception_d(Builder& b, const std::string& name) {
    Inception m(b, name);
    m.branch([](Builder& x) { x.conv("branch3x3_1", 192, 1); x.conv("branch3x3_2", 320, 3, 2); });
    m.branch([](Builder& x) {
        x.conv("branch7x7x3_1", 192, 1);
        x.conv_rect("branch7x7x3_2", 192, 1, 7, 1, 0, 3);
        x.conv_rect("branch7x7x3_3", 192, 7, 1, 1, 3, 0);
        x.conv("branch7x7x3_4", 192, 3, 2);
    });
    m.branch([](Builder& x) { x.pool("maxpool", 3, 2); });
    m.done();
}

void inception_e(Builder& b, const std::string& name) {
    Inception m(b, name);
    m.branch([](Builder& x) { x.conv("branch1x1", 320, 1); });
    // The 3×3 branch splits into a 1×3 and a 3×1 conv side by side, both from the 1×1's output.
    m.branch([](Builder& x) {
        x.conv("branch3x3_1", 384, 1);
        Builder a = x, c = x;
        a.layers.clear();
        c.layers.clear();
        a.conv_rect("branch3x3_2a", 384, 1, 3, 1, 0, 1);
        c.conv_rect("branch3x3_2b", 384, 3, 1, 1, 1, 0);
        x.layers.push_back(a.layers.back());
        x.layers.push_back(c.layers.back());
        x.c = a.c + c.c;
    });
    m.branch([](Builder& x) {
        x.conv("branch3x3dbl_1", 448, 1);
        x.conv("branch3x3dbl_2", 384, 3, 1, 1);
        Builder a = x, c = x;
        a.layers.clear();
        c.layers.clear();
        a.conv_rect("branch3x3dbl_3a", 384, 1, 3, 1, 0, 1);
        c.conv_rect("branch3x3dbl_3b", 384, 3, 1, 1, 1, 0);
        x.layers.push_back(a.layers.back());
        x.layers.push_back(c.layers.back());
        x.c = a.c + c.c;
    });
    m.branch([](Builder& x) { x.pool("avgpool", 3, 1, 1); x.conv("branch_pool", 192, 1); });
    m.done();
}

Model inception_v3() {
    Builder b{3, 299, 299};
    b.conv("Conv2d_1a_3x3", 32, 3, 2);
    b.conv("Conv2d_2a_3x3", 32, 3);
    b.conv("Conv2d_2b_3x3", 64, 3, 1, 1);
    b.pool("maxpool1", 3, 2);
    b.conv("Conv2d_3b_1x1", 80, 1);
    b.conv("Conv2d_4a_3x3", 192, 3);
    b.pool("maxpool2", 3, 2);
    inception_a(b, "Mixed_5b", 32);
    inception_a(b, "Mixed_5c", 64);
    inception_a(b, "Mixed_5d", 64);
    inception_b(b, "Mixed_6a");
    inception_c(b, "Mixed_6b", 128);
    inception_c(b, "Mixed_6c", 160);
    inception_c(b, "Mixed_6d", 160);
    inception_c(b, "Mixed_6e", 192);
    inception_d(b, "Mixed_7a");
    inception_e(b, "Mixed_7b");
    inception_e(b, "Mixed_7c");
    b.global_pool("avgpool");
    b.fc("fc", 1000);
    return Model::layer_list("inception-v3", std::move(b.layers), static_cast<int>(3 * 299 * 299 * kFloatBytes));
}

// ---- MLPs on 28×28 inputs (MNIST-sized): fully connected layers with biases and ReLU ------------

Model mlp(const std::string& name, const std::vector<std::int64_t>& hidden) {
    Builder b{1, 28, 28};
    int i = 0;
    for (std::int64_t width : hidden) b.fc("fc" + std::to_string(++i), width);
    b.fc("out", 10);
    return Model::layer_list(name, std::move(b.layers), static_cast<int>(28 * 28 * kFloatBytes));
}

const std::map<std::string, std::function<Model()>>& presets() {
    static const std::map<std::string, std::function<Model()>> all{
        {"alexnet", alexnet},
        {"inception-v3", inception_v3},
        {"mlp-large", [] { return mlp("mlp-large", {8192, 8192, 8192}); }},
        {"mlp-small", [] { return mlp("mlp-small", {1024, 1024}); }},
        {"resnet101", [] { return resnet("resnet101", {3, 4, 23, 3}); }},
        {"resnet50", [] { return resnet("resnet50", {3, 4, 6, 3}); }},
        {"vgg16", vgg16},
    };
    return all;
}

}  // namespace

std::vector<std::string> cnn_preset_names() {
    std::vector<std::string> names;
    for (const auto& [name, make] : presets()) names.push_back(name);
    return names;
}

std::optional<Model> cnn_preset(const std::string& name) {
    const auto it = presets().find(name);
    if (it == presets().end()) return std::nullopt;
    return it->second();
}

}  // namespace smol
