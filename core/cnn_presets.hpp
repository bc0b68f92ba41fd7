// CNN and MLP presets as layer lists, generated from their architectures (not tables of totals):
// resnet50, resnet101 (He et al. 2016, torchvision v1.5: stride on the 3×3), vgg16 (Simonyan &
// Zisserman 2015, configuration D), alexnet (Krizhevsky 2014's one-tower AlexNet, torchvision's),
// inception-v3 (Szegedy et al. 2016, torchvision without the
// auxiliary classifier), and a small MLP family (mlp-small, mlp-large) on 28×28 inputs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/model.hpp"

namespace smol {

/// Names of the layer-list presets, sorted.
std::vector<std::string> cnn_preset_names();
/// The preset, or nullopt when `name` is not a layer-list preset.
std::optional<Model> cnn_preset(const std::string& name);

}  // namespace smol
