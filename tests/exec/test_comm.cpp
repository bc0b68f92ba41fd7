// Collectives and point to point of the CPU backend compute the right values on real buffers
// (the functions the backend calls for a graph's ops), under mpirun -np 2 and -np 4.
#include <catch2/catch.hpp>

#include <vector>

#include "exec/cpu/comm.hpp"
#include "exec/mpi.hpp"
#include "exec_support.hpp"

using namespace smol;
using exec::cpu::collective_counts;
using exec::cpu::run_collective;

namespace {

/// Small integers, so float sums are exact: rank r, element i.
float value(int r, std::int64_t i) { return static_cast<float>((r + 1) * (1 + i % 7)); }

}  // namespace

TEST_CASE("an all-reduce of rank-dependent data equals the sum over ranks", "[exec][mpi][comm]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    const std::int64_t bytes = 4 * 1003;
    std::vector<float> in(1003), out(1003, -1);
    for (std::int64_t i = 0; i < 1003; ++i) in[static_cast<std::size_t>(i)] = value(me, i);
    run_collective(CollectiveKind::all_reduce, in.data(), out.data(), bytes, 0, mpi.world());
    for (std::int64_t i = 0; i < 1003; ++i) {
        float sum = 0;
        for (int r = 0; r < p; ++r) sum += value(r, i);
        CHECK(out[static_cast<std::size_t>(i)] == sum);
    }
}

TEST_CASE("a reduce-scatter then an all-gather returns the input", "[exec][mpi][comm]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    const std::int64_t bytes = 4 * 64 * p;
    const auto n = collective_counts(CollectiveKind::reduce_scatter, bytes, p);
    // The input is split across ranks: rank r contributes the elements i with i mod p == r and
    // zeros elsewhere, so the sum over ranks is the input itself.
    std::vector<float> input(static_cast<std::size_t>(n.send)), mine(input.size()), block(static_cast<std::size_t>(n.recv));
    for (std::size_t i = 0; i < input.size(); ++i) {
        input[i] = static_cast<float>(3 * i + 1);
        mine[i] = static_cast<int>(i % static_cast<std::size_t>(p)) == me ? input[i] : 0.0f;
    }
    run_collective(CollectiveKind::reduce_scatter, mine.data(), block.data(), bytes, 0, mpi.world());
    // Rank r holds block r of the sum.
    for (std::size_t i = 0; i < block.size(); ++i) CHECK(block[i] == input[static_cast<std::size_t>(me) * block.size() + i]);
    std::vector<float> back(input.size(), -1);
    run_collective(CollectiveKind::all_gather, block.data(), back.data(), bytes, 0, mpi.world());
    CHECK(back == input);
}

TEST_CASE("broadcast, reduce and all-to-all move the right blocks", "[exec][mpi][comm]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank(), root = p - 1;
    SECTION("broadcast from the last rank") {
        std::vector<float> buf(100);
        for (std::int64_t i = 0; i < 100; ++i) buf[static_cast<std::size_t>(i)] = value(me, i);
        run_collective(CollectiveKind::broadcast, nullptr, buf.data(), 400, root, mpi.world());
        for (std::int64_t i = 0; i < 100; ++i) CHECK(buf[static_cast<std::size_t>(i)] == value(root, i));
    }
    SECTION("reduce to the last rank") {
        std::vector<float> in(100), out(100, -1);
        for (std::int64_t i = 0; i < 100; ++i) in[static_cast<std::size_t>(i)] = value(me, i);
        run_collective(CollectiveKind::reduce, in.data(), out.data(), 400, root, mpi.world());
        if (me == root)
            for (std::int64_t i = 0; i < 100; ++i) {
                float sum = 0;
                for (int r = 0; r < p; ++r) sum += value(r, i);
                CHECK(out[static_cast<std::size_t>(i)] == sum);
            }
    }
    SECTION("all-to-all: block j of rank r arrives as block r of rank j") {
        const std::int64_t per = 10, bytes = 4 * per * p;
        std::vector<float> in(static_cast<std::size_t>(per * p)), out(in.size(), -1);
        for (int j = 0; j < p; ++j)
            for (std::int64_t i = 0; i < per; ++i) in[static_cast<std::size_t>(j * per + i)] = static_cast<float>(1000 * me + 10 * j + i);
        run_collective(CollectiveKind::all_to_all, in.data(), out.data(), bytes, 0, mpi.world());
        for (int r = 0; r < p; ++r)
            for (std::int64_t i = 0; i < per; ++i) CHECK(out[static_cast<std::size_t>(r * per + i)] == static_cast<float>(1000 * r + 10 * me + i));
    }
    SECTION("barrier") { run_collective(CollectiveKind::barrier, nullptr, nullptr, 0, 0, mpi.world()); }
}

TEST_CASE("a send delivers the sender's bytes, waited for by polling", "[exec][mpi][comm]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    // A ring: each rank sends to the next and receives from the previous, 1 MiB + 3 bytes.
    const std::int64_t bytes = (1 << 20) + 3;
    std::vector<unsigned char> out(static_cast<std::size_t>(bytes)), in(static_cast<std::size_t>(bytes), 0);
    for (std::int64_t i = 0; i < bytes; ++i) out[static_cast<std::size_t>(i)] = static_cast<unsigned char>((me * 31 + i) & 0xff);
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    MPI_Request r = exec::cpu::post_recv(in.data(), bytes, prev, 42, mpi.p2p());
    MPI_Request s = exec::cpu::post_send(out.data(), bytes, next, 42, mpi.p2p());
    exec::cpu::wait_polling(s);
    exec::cpu::wait_polling(r);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < bytes; ++i) bad += in[static_cast<std::size_t>(i)] != static_cast<unsigned char>((prev * 31 + i) & 0xff);
    CHECK(bad == 0);
}
