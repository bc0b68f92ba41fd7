#include "exec/cpu/host_buffers.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.hpp"
#include "core/units.hpp"
#include "exec/cpu/backend.hpp"

namespace smol::exec::cpu {

namespace {
constexpr std::int64_t kPage = 4096;
}

HostBuffers::~HostBuffers() {
    for (void* p : blocks_) std::free(p);
}

void HostBuffers::reset(int rank, std::size_t buffers) {
    std::lock_guard<std::mutex> lock(mu_);
    rank_ = rank;
    block_of_.assign(buffers, nullptr);
    file_of_.assign(buffers, {});
}

void HostBuffers::allocate(std::int32_t index, const Buffer& b) {
    if (b.bytes <= 0) return;
    const auto i = static_cast<std::size_t>(index);
    const std::string label = to_string(static_cast<BufferLabel>(b.label));
    if (b.tier == Tier::nvme) {
        std::string path;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (auto it = free_files_.find(b.bytes); it != free_files_.end()) {
                path = it->second;
                free_files_.erase(it);
            } else {
                path = scratch_.next_file(rank_, "buffer");
            }
        }
        const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
        if (fd < 0) fail_io("cannot create", path);
        const int rc = posix_fallocate(fd, 0, static_cast<off_t>(b.bytes));
        close(fd);
        if (rc != 0) {
            errno = rc;
            fail_io("cannot reserve " + to_string(Bytes(b.bytes)) + " of " + label + " in", path);
        }
        std::lock_guard<std::mutex> lock(mu_);
        file_of_[i] = path;
        return;
    }
    void* p = nullptr;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = free_blocks_.find(b.bytes); it != free_blocks_.end()) {
            p = it->second;
            free_blocks_.erase(it);
        }
    }
    if (!p) {
        const std::int64_t bytes = round_up(b.bytes, kPage);
        p = std::aligned_alloc(kPage, static_cast<std::size_t>(bytes));
        if (!p)
            throw Error(ErrorKind::bad_input, "rank " + std::to_string(rank_) + " cannot allocate " + to_string_binary(Bytes(bytes)) +
                                                  " of host memory for " + label);
        auto* c = static_cast<volatile char*>(p);
        for (std::int64_t o = 0; o < bytes; o += kPage) c[o] = 0;
        std::lock_guard<std::mutex> lock(mu_);
        blocks_.push_back(p);
    }
    std::lock_guard<std::mutex> lock(mu_);
    block_of_[i] = p;
}

void HostBuffers::release(std::int32_t index, const Buffer& b) {
    const auto i = static_cast<std::size_t>(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (block_of_[i]) {
        free_blocks_.emplace(b.bytes, block_of_[i]);
        block_of_[i] = nullptr;
    }
    if (!file_of_[i].empty()) {
        free_files_.emplace(b.bytes, file_of_[i]);
        file_of_[i].clear();
    }
}

}  // namespace smol::exec::cpu
