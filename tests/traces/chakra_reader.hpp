// Reads a Chakra execution trace back with the classes protoc generates from Chakra's schema
// (traces/proto/et_def.proto), framed as Chakra's ProtoInputStream::read does
// (src/third_party/utils/protoio.cc: ReadVarint32, PushLimit, ParseFromCodedStream). Shared by
// the writer's round-trip test and the command line's export test.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "et_def.pb.h"

namespace smol::test {

struct ChakraTrace {
    ChakraProtoMsg::GlobalMetadata metadata;
    std::vector<ChakraProtoMsg::Node> nodes;
};

/// Every message of `bytes`: GlobalMetadata first, then nodes to the end; fails the test on a
/// message that does not parse or a length that runs past the end.
inline ChakraTrace read_chakra(const std::string& bytes) {
    google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
    ChakraTrace t;
    bool first = true;
    while (true) {
        google::protobuf::io::CodedInputStream in(&raw);
        std::uint32_t size = 0;
        if (!in.ReadVarint32(&size)) break;
        const auto limit = in.PushLimit(static_cast<int>(size));
        if (first) {
            REQUIRE(t.metadata.ParseFromCodedStream(&in));
            first = false;
        } else {
            REQUIRE(t.nodes.emplace_back().ParseFromCodedStream(&in));
        }
        REQUIRE(in.BytesUntilLimit() == 0);
        in.PopLimit(limit);
    }
    REQUIRE_FALSE(first);   // a file holds at least its GlobalMetadata
    return t;
}

/// A node's attributes by name (each name once).
inline std::map<std::string, ChakraProtoMsg::AttributeProto> attrs(const ChakraProtoMsg::Node& n) {
    std::map<std::string, ChakraProtoMsg::AttributeProto> out;
    for (const auto& a : n.attr()) REQUIRE(out.emplace(a.name(), a).second);
    return out;
}

}  // namespace smol::test
