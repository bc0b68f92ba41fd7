# The two commands a new user types:  make run   and   make test.
# Each installs missing Debian packages, configures and builds in Release, then runs.
#   make run       builds smolcluster alone and simulates the main job (a trace and its picture)
#   make test      builds everything (tests, benchmarks), runs the suite, then the sanitizer suite
#                  (make test-asan) and every fuzz target for FUZZ_SECONDS (make fuzz): what CI runs
#   make test-asan the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang,
#                  float-cast-overflow included, every report fatal), in its own build dir
#   make fuzz      the libFuzzer targets of fuzz/ (model, HF config, cluster, plan, profile), each for
#                  FUZZ_SECONDS from the checked-in seeds and dictionaries, in the same build dir
#   make validate  every published measurement of validation/ simulated, the per-source error table

BUILD ?= build
SAN_BUILD ?= build-asan
JOBS  ?= $(shell nproc)
FUZZ_SECONDS ?= 60
DEB_PACKAGES := cmake g++ make nlohmann-json3-dev libboost-graph-dev catch2 libcli11-dev zlib1g-dev nodejs python3 \
                python3-matplotlib libopenmpi-dev openmpi-bin libopenblas-dev pkg-config \
                protobuf-compiler libprotobuf-dev
# What the sanitizer suite and the fuzzers need besides: clang, its sanitizer and libFuzzer
# runtimes, and llvm-symbolizer for readable reports.
DEB_TEST_PACKAGES := clang libclang-rt-dev llvm
SMOL := $(BUILD)/tools/smolcluster
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
           LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0

.PHONY: all deps deps-test build run test test-asan fuzz bench validate clean

all: build

# Installs what is missing of $(1) with apt-get (sudo when not root).
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  sudo=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; \
	fi
endef

deps:
	$(call apt_install,$(DEB_PACKAGES))

deps-test: deps
	$(call apt_install,$(DEB_TEST_PACKAGES))

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# The main job: GPT-2 small, PyTorch DDP, four Raspberry Pi 5 on gigabit Ethernet. Only the
# smolcluster binary is built (the tests and benchmarks are make test's).
run: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target smolcluster
	$(SMOL) simulate --model gpt2-small --cluster pi5-1gbe --nodes 4 --strategy ddp --trace out/trace.json --force
	$(SMOL) plot timeline out/trace.json -o out/timeline.png --force

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory fuzz

# One sanitizer build serves the suite and the fuzzers: clang, SMOL_SANITIZE (CMakeLists.txt).
$(SAN_BUILD)/CMakeCache.txt: | deps-test
	cmake -S . -B $(SAN_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Sanitize -DSMOL_SANITIZE=ON -DSMOL_CUDA=OFF

test-asan: deps-test $(SAN_BUILD)/CMakeCache.txt
	cmake --build $(SAN_BUILD) -j $(JOBS) --target tests
	cd $(SAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS)

fuzz: deps-test $(SAN_BUILD)/CMakeCache.txt
	cmake --build $(SAN_BUILD) -j $(JOBS) --target fuzzers
	$(SAN_ENV) FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) fuzz/run.sh $(SAN_BUILD)

bench: build
	cmake --build $(BUILD) -j $(JOBS) --target benchmarks
	@for b in $(BUILD)/bench/bench_*; do echo "== $$b"; $$b; done

# The published-measurement harness (bench/bench_published.cpp): the table on stdout, every row
# with its command line, measured and simulated step time, error or reason in out/validation.csv.
validate: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target bench_published
	@mkdir -p out
	$(BUILD)/bench/bench_published --csv out/validation.csv --json out/validation.json

clean:
	rm -rf $(BUILD) $(SAN_BUILD) out
