// The `localhost` cluster: the machine smolcluster runs on, described from what the OS says, so
// `mpirun -np 2 smolcluster run --cluster localhost …` works anywhere without a cluster file.
//
// One node whose devices are CPU ranks (MPI processes) sharing the host's cores and memory:
//   devices  = the MPI local size when started by mpirun (OMPI_COMM_WORLD_LOCAL_SIZE, or
//              MPI_LOCALNRANKS under MPICH's hydra), else one per online core;
//   peak     = cores × clock × fp32 FLOPs per cycle per core, split evenly over the devices. The
//              clock is cpufreq's cpuinfo_max_freq, else /proc/cpuinfo's "cpu MHz"; FLOPs per
//              cycle follow the vector ISA /proc/cpuinfo lists: 32 with AVX2 + FMA (two 256-bit
//              FMA pipes × 8 lanes × 2; AVX-512 parts such as Zen 4 issue the same 2 × 256 bits),
//              16 with AVX or on aarch64 with Advanced SIMD (two 128-bit FMA pipes: Cortex-A72,
//              A76), 8 otherwise (one 128-bit pipe);
//   memory   = MemTotal of /proc/meminfo, split evenly over the devices;
//   bandwidth= 6.4 GB/s per core (a DDR4-3200 channel, 25.6 GB/s, per four cores): the OS does
//              not say, so this is a round lead;
//   the ranks meet through shared memory (intra `shm`) at half the memory bandwidth (a message
//   is copied in and out of the shared segment); one loopback "NIC" that no route uses.
// Every figure is a lead: `smolcluster calibrate` measures the machine and `--profile` replaces
// them.
#pragma once

#include <string>

#include "core/json.hpp"
#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace smol::topo {

/// What the OS says about this machine.
struct HostFacts {
    std::string hostname;
    std::string cpu_model;         // "AMD EPYC", "Raspberry Pi 5 Model B Rev 1.0"
    int cores = 1;                 // online CPUs
    Bytes memory;                  // MemTotal
    double clock_ghz = 0;          // 0: unknown
    std::string clock_source;      // where clock_ghz came from
    int flops_per_cycle = 8;       // fp32, per core
    std::string isa;               // "avx2+fma", "asimd", …
    Bytes scratch_free;            // free space in the temporary directory (the NVMe tier)
};
HostFacts read_host_facts();

/// The MPI local size from the launcher's environment, or 0 when not started by mpirun.
int mpi_local_size_from_env();

/// The cluster JSON of this machine with `devices` CPU ranks (see the header comment).
Json localhost_json(const HostFacts& facts, int devices);
/// localhost_json(read_host_facts(), MPI local size or cores), read as any cluster file is.
Cluster localhost_cluster();

}  // namespace smol::topo
