#!/usr/bin/env bash
# The CUDA backend on a machine with a GPU, in one go (about 5 minutes on one H200 with 16 cores):
#
#   1. build in Release with the CUDA backend (-j of the machine): smolcluster, the CUDA tests,
#      bench_gpu; for the GPU it finds (nvidia-smi's compute capability), else sm_80 and sm_90
#   2. run the CUDA tests (ctest -R '^cuda': kernels, GEMMs, the runner; NCCL and two-GPU plans
#      skip with one GPU)
#   3. calibrate: bench_gpu calibrate (GEMM grid per dtype, HBM, softmax, flash, Adam, launch
#      overhead, pinned copies, NCCL where there are several GPUs) into gpu-figures.json; and a
#      GPU's profile from `smolcluster calibrate --backend cuda` (h200-profile.json)
#   4. a bf16 8192³ GEMM op through the executor against a bare cuBLASLt call (target ≥ 90 %)
#   5. single-GPU plans on hgx-h200 --devices 1, simulated and run: gpt2-small, gpt2-xl, and the
#      offload plan once --offload cpu is accepted (skipped with a message until then); with
#      `smolcluster validate` where this build has it (with the profile when there is one),
#      else `simulate --json` against `run --json`
#   6. the table: plan, simulated, measured, step error, per-class errors; median |step error|
#
# Usage: bench/gpu_validate.sh [OUTDIR]   (default: $OUT when set, as the device tool gives, else
# out/gpu-validate). Writes gpu-figures.json, validate-*.json, table.md and log.txt there.
# Exit status: 0 when every step ran and passed, 1 when a check failed, 2 when it cannot build.
#
# Build dependencies (Debian/Ubuntu names): cmake g++ nlohmann-json3-dev libboost-graph-dev
# catch2 libcli11-dev zlib1g-dev libopenmpi-dev openmpi-bin libopenblas-dev pkg-config
# protobuf-compiler libprotobuf-dev, the CUDA
# toolkit and NCCL (system, or the pip wheel nvidia-nccl-cu13). A machine that has not got them
# and cannot install them uses the Debian packages bench/gpu_deps.sh downloads into .gpu-deps/
# (carry that folder): they are unpacked under /tmp and used from there.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$here/out/gpu-validate}}
mkdir -p "$out"
log=$out/log.txt
: > "$log"
build=${SMOL_GPU_BUILD:-$here/build-gpu}   # the build folder (SMOL_GPU_BUILD to reuse one)
started=$(date +%s)
failures=()

say() { echo "$@" | tee -a "$log"; }
phase() { say ""; say "== $1 ($(( $(date +%s) - started )) s)"; }
fail() { failures+=("$1"); say "FAILED: $1"; }
# Runs a command with a time limit, its output to the log (and the terminal).
run() {
    local limit=$1; shift
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}

# ---- 0. the machine ---------------------------------------------------------------------------
phase "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | tee -a "$log" || true
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
say "cores $(nproc), GPUs $gpus, compute capability ${cc:-unknown}"
[ "$gpus" -gt 0 ] || say "warning: nvidia-smi sees no GPU: the CUDA tests will skip and the GPU steps fail"
ranks=$(( gpus > 0 ? gpus : 1 ))
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH

# NCCL: beside the toolkit, or from the pip wheel (nvidia-nccl-cu13) of the machine's python.
cmake_extra=()
if ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
    nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
    if [ -n "$nccl_root" ] && [ -f "$nccl_root/include/nccl.h" ]; then
        say "NCCL from the pip wheel: $nccl_root"
        cmake_extra+=("-DNCCL_ROOT=$nccl_root")
        export LD_LIBRARY_PATH=$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
fi

# The carried Debian packages, unpacked under /tmp (never into /): what their maintainer scripts
# would have done is done here — the update-alternatives links (mpicxx → mpicxx.openmpi, …),
# absolute symlinks pointed into the unpacked tree — and the environment points at the tree
# (Open MPI relocates to OPAL_PREFIX; pkg-config prefixes its paths with the sysroot).
use_carried_deps() {
    root=/tmp/smol-deps
    rm -rf "$root"; mkdir -p "$root"
    for d in "$here"/.gpu-deps/*.deb; do dpkg-deb -x "$d" "$root"; done
    for f in "$root"/usr/bin/*.openmpi; do ln -sf "$(basename "$f")" "${f%.openmpi}"; done
    find "$root" -type l | while read -r link; do
        target=$(readlink "$link")
        case $target in /*) [ -e "$root$target" ] && ln -sf "$root$target" "$link" ;; esac
    done
    local multiarch lib
    multiarch=$(ls "$root/usr/lib" | grep -- '-linux-gnu$' | head -1)
    lib=$root/usr/lib/$multiarch
    export OPAL_PREFIX=$root/usr
    export PATH=$root/usr/bin:$PATH
    export LD_LIBRARY_PATH=$lib:$root/lib/$multiarch:$lib/openmpi/lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_LIBDIR=$lib/openblas-pthread/pkgconfig:$lib/pkgconfig:$root/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$root
    cmake_extra+=("-DCMAKE_PREFIX_PATH=$root/usr" "-DMPI_CXX_COMPILER=$root/usr/bin/mpicxx")
}

# Build dependencies: the machine's, else the carried Debian packages.
missing=()
for h in /usr/include/nlohmann/json.hpp /usr/include/boost/graph/compressed_sparse_row_graph.hpp \
         /usr/include/CLI/CLI.hpp /usr/include/catch2/catch.hpp /usr/include/google/protobuf/message.h; do
    [ -f "$h" ] || missing+=("$h")
done
command -v mpicxx >/dev/null || missing+=(mpicxx)
command -v mpirun >/dev/null || missing+=(mpirun)
command -v protoc >/dev/null || missing+=(protoc)
pkg-config --exists openblas 2>/dev/null || missing+=(openblas)
# SMOL_GPU_DEPS=carried uses the carried packages even where the machine has its own.
if [ ${#missing[@]} -gt 0 ] || [ "${SMOL_GPU_DEPS:-}" = carried ]; then
    say "missing here: ${missing[*]:-nothing (SMOL_GPU_DEPS=carried)}"
    if ls "$here"/.gpu-deps/*.deb >/dev/null 2>&1; then
        use_carried_deps
        say "using the carried packages unpacked in $root"
    else
        say "cannot build: install the packages above (bench/gpu_validate.sh's header lists them), or run"
        say "bench/gpu_deps.sh on a machine with apt and carry .gpu-deps/"
        exit 2
    fi
fi
# mpirun as a word list (run's time limit cannot call a shell function); unbound, so a rank's
# stream threads may use every core.
mpi=(mpirun --bind-to none)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- 1. build ---------------------------------------------------------------------------------
phase "build"
arch="80-real;90"
[ -n "$cc" ] && arch=$cc
generator=()
[ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null && generator=(-G Ninja)
if ! run 600 cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSMOL_CUDA=ON \
        "-DCMAKE_CUDA_ARCHITECTURES=$arch" "${cmake_extra[@]}"; then
    say "cannot configure"; exit 2
fi
if ! grep -q '^SMOL_HAVE_CUDA:INTERNAL=ON' "$build/CMakeCache.txt"; then
    say "CMake did not enable the CUDA backend (see 'smolcluster:' lines above): no CUDA toolkit, cuBLASLt or NCCL"
    exit 2
fi
if ! run 900 cmake --build "$build" -j "$(nproc)" --target smolcluster test_cuda bench_gpu; then
    say "cannot build"; exit 2
fi
smol=$build/tools/smolcluster
bench=$build/bench/bench_gpu

# ---- 2. tests ---------------------------------------------------------------------------------
phase "CUDA tests"
(cd "$build" && run 300 ctest -R '^cuda' --output-on-failure) || fail "CUDA tests"

# ---- 3. calibration ---------------------------------------------------------------------------
phase "calibration"
run 240 "${mpi[@]}" -np "$ranks" "$bench" calibrate --out "$out/gpu-figures.json" --force || fail "bench_gpu calibrate"
profile=()
if "$smol" calibrate --help 2>/dev/null | grep -q -- '--backend'; then
    if run 300 "${mpi[@]}" -np 1 "$smol" calibrate --backend cuda --out "$out/h200-profile.json" --force; then
        profile=(--profile "$out/h200-profile.json")
    else
        fail "smolcluster calibrate --backend cuda"
    fi
else
    say "note: smolcluster calibrate does not measure GPUs in this build: plans are simulated with hgx-h200's leads"
fi

# ---- 4. GEMM through the executor against bare cuBLASLt ---------------------------------------
phase "bf16 8192³ GEMM: executor against bare cuBLASLt"
run 120 "${mpi[@]}" -np 1 "$bench" gemm --size 8192 || fail "bf16 8192³ GEMM below 90 % of bare cuBLASLt"

# ---- 5. single-GPU plans ----------------------------------------------------------------------
phase "single-GPU plans on hgx-h200 --devices 1"
plans=("gpt2-small|--model gpt2-small --micro-batch 8" "gpt2-xl|--model gpt2-xl --micro-batch 4")
if "$smol" simulate --model gpt2-small --cluster hgx-h200 --devices 1 --strategy zero2 --offload cpu >/dev/null 2>&1; then
    plans+=("gpt2-xl-offload-cpu|--model gpt2-xl --micro-batch 4 --strategy zero2 --offload cpu")
else
    say "skipped: the offload plan (this build does not accept --strategy zero2 --offload cpu)"
fi
have_validate=0
"$smol" validate --help >/dev/null 2>&1 && have_validate=1
for entry in "${plans[@]}"; do
    name=${entry%%|*}
    flags=${entry#*|}
    # shellcheck disable=SC2086
    set -- $flags --cluster hgx-h200 --devices 1
    say "-- $name: $*"
    if [ "$have_validate" -eq 1 ]; then
        run 300 "${mpi[@]}" -np 1 "$smol" validate "$@" --backend cuda "${profile[@]}" --tolerance 1 --json \
            > "$out/validate-$name.json" || fail "validate $name"
    else
        "$smol" simulate "$@" --json > "$out/simulate-$name.json" 2>>"$log" || fail "simulate $name"
        run 300 "${mpi[@]}" -np 1 "$smol" run "$@" --backend cuda --json > "$out/run-$name.json" || fail "run $name"
    fi
done

# ---- 6. the table -----------------------------------------------------------------------------
phase "table"
python3 - "$out" "${#profile[@]}" <<'EOF' | tee -a "$log" "$out/table.md"
import glob, json, os, statistics, sys
out, profiled = sys.argv[1], sys.argv[2] != "0"
def load(path):
    try:
        with open(path) as f:
            text = f.read()
        # mpirun may add lines around the JSON object; take the object itself.
        return json.loads(text[text.index("{"):text.rindex("}") + 1])
    except (OSError, ValueError):
        return None
classes = ["gemm", "attention", "elementwise", "optimizer", "copy"]
rows, errors = [], []
names = sorted({os.path.basename(p).split("-", 1)[1][:-5] for p in glob.glob(out + "/validate-*.json") + glob.glob(out + "/run-*.json")})
for name in names:
    v = load(f"{out}/validate-{name}.json")
    if v:
        sim, real, err = v["simulated_step_s"], v["measured_step_s"], v["step_error"]
        per = {c: v.get("per_class", {}).get(c, {}).get("error") for c in classes}
    else:
        s, r = load(f"{out}/simulate-{name}.json"), load(f"{out}/run-{name}.json")
        if not s or not r:
            rows.append(f"| {name} | — | — | did not run | " + " | ".join("—" for _ in classes) + " |")
            continue
        sim, real = s["iteration_time_s"], r["iteration_time_s"]
        err = sim / real - 1
        per = {c: None for c in classes}
    errors.append(abs(err))
    pc = " | ".join("—" if per[c] is None else f"{100 * per[c]:+.1f} %" for c in classes)
    rows.append(f"| {name} | {1e3 * sim:.2f} ms | {1e3 * real:.2f} ms | {100 * err:+.1f} % | {pc} |")
how = "calibrated profile" if profiled else "hgx-h200's datasheet leads (no GPU profile)"
print(f"Single-GPU plans on hgx-h200 --devices 1, simulated with {how}, measured by the CUDA backend:\n")
print("| plan | simulated | measured | step error | " + " | ".join(classes) + " |")
print("|---|---|---|---|" + "---|" * len(classes))
for r in rows:
    print(r)
if errors:
    m = statistics.median(errors)
    print(f"\nmedian |step error| {100 * m:.1f} % over {len(errors)} plans (target <= 5 %: {'met' if m <= 0.05 else 'MISSED'})")
    sys.exit(0 if m <= 0.05 else 3)
sys.exit(3)
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "median |step error| above 5 % (or no plan ran)"

phase "done"
if [ ${#failures[@]} -gt 0 ]; then
    say "failed: ${failures[*]}"
    exit 1
fi
say "every step passed in $(( $(date +%s) - started )) s; results in $out"
