// Helpers shared by the test suites.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/model.hpp"

namespace smol::test {

/// The message of the bad_input error thrown by `f`; fails the test if none (or another kind) is thrown.
template <typename F>
std::string bad_input_message(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::bad_input);
        return e.what();
    }
    FAIL("no error thrown");
    return "";
}

/// A model from its JSON text (smolcluster's own or a HuggingFace config.json), read as the file
/// NAME.json.
inline Model model_from_text(const std::string& text, const std::string& name = "inline") {
    static Json keep;  // the view points into the document; keep it alive for the call
    keep = parse_json_text(text, name + ".json");
    return model_from_json(JsonView(keep, name + ".json"), name);
}

}  // namespace smol::test
