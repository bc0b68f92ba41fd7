#!/usr/bin/env bash
# Downloads (apt-get download: no install, nothing run) the Debian packages bench/gpu_validate.sh
# builds smolcluster against, into .gpu-deps/ at the repository's root: for a GPU machine that
# has the CUDA toolkit, a compiler and CMake but not these, and cannot reach a package registry.
# Carry .gpu-deps/ with the working tree (it is git-ignored; the device tool's `carry`); about
# 35 MB. gpu_validate.sh unpacks them under /tmp (dpkg-deb -x, never into /) only when the
# machine lacks the headers, MPI or OpenBLAS.
#
# The list: the build's headers (nlohmann-json, Boost.Graph's headers and CMake files, Catch2,
# CLI11, zlib), pkg-config, Open MPI 4.1 (compiler wrappers, mpirun, its libraries and theirs),
# OpenBLAS (and the gfortran runtime it needs), protobuf's compiler and library (the Chakra export's
# generated classes, traces/CMakeLists.txt). Run on Debian 12 or a system with its package
# lists (apt-get update first).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/.gpu-deps
mkdir -p "$dest"
cd "$dest"
packages=(
  nlohmann-json3-dev libboost1.74-dev libboost-graph1.74-dev libboost-graph1.74.0 libboost-regex1.74-dev
  libboost-regex1.74.0 libboost-serialization1.74-dev libboost-serialization1.74.0 libboost-test1.74-dev
  catch2 libcli11-dev zlib1g-dev zlib1g pkg-config pkgconf pkgconf-bin libpkgconf3
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libhwloc-plugins libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 libltdl7 libpciaccess0
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5
  protobuf-compiler libprotoc32 libprotobuf-dev libprotobuf32 libprotobuf-lite32
)
apt-get download "${packages[@]}"
du -sh "$dest"
echo "carry .gpu-deps with the working tree: run(command=\"bash bench/gpu_validate.sh\", carry=[\".gpu-deps\"])"
