// Helpers shared by the test suites.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"

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

}  // namespace smol::test
