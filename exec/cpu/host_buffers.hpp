#pragma once
// The host and NVMe tiers' buffers of one rank, shared by both backends.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/op_graph.hpp"

namespace smol::exec::cpu {

class ScratchDir;

/// A graph's host-tier and NVMe-tier buffers as the backends hold them: a host buffer is a
/// page-aligned block with every page touched, so that it is resident as a framework's first
/// write makes it; an NVMe buffer is a file of the rank's scratch folder with its bytes reserved
/// (posix_fallocate). A released buffer's block or file is kept for the next buffer of the same
/// size. Blocks are freed with this object, files with the scratch folder. Streams allocate and
/// release concurrently: every member is thread-safe.
class HostBuffers {
public:
    explicit HostBuffers(ScratchDir& scratch) : scratch_(scratch) {}
    ~HostBuffers();
    HostBuffers(const HostBuffers&) = delete;
    HostBuffers& operator=(const HostBuffers&) = delete;

    /// For `rank`'s part of a graph of `buffers` buffers (before its first allocate).
    void reset(int rank, std::size_t buffers);
    /// Allocates buffer `index` (b: its description; tier host or nvme). bad_input naming the
    /// rank, the size and what the buffer holds when the host has no memory or the file system
    /// no room for it.
    void allocate(std::int32_t index, const Buffer& b);
    /// Keeps buffer `index`'s block or file for reuse; nothing when it holds none.
    void release(std::int32_t index, const Buffer& b);

private:
    ScratchDir& scratch_;
    int rank_ = 0;
    std::mutex mu_;
    std::multimap<std::int64_t, void*> free_blocks_;         // size → kept block
    std::multimap<std::int64_t, std::string> free_files_;    // size → kept file
    std::vector<void*> block_of_;                            // per buffer, while allocated
    std::vector<std::string> file_of_;
    std::vector<void*> blocks_;                              // every block made, for the destructor
};

}  // namespace smol::exec::cpu
