# The two commands a new user types:  make run   and   make test.
# Each installs missing Debian packages, configures and builds in Release, then runs.
# make validate: every published measurement of validation/ simulated, the per-source error table.

BUILD ?= build
JOBS  ?= $(shell nproc)
DEB_PACKAGES := cmake g++ make nlohmann-json3-dev libboost-graph-dev catch2 libcli11-dev zlib1g-dev nodejs python3 \
                python3-matplotlib libopenmpi-dev openmpi-bin libopenblas-dev pkg-config
SMOL := $(BUILD)/tools/smolcluster

.PHONY: all deps build run test bench validate clean

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  sudo=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# The main job: GPT-2 small, PyTorch DDP, four Raspberry Pi 5 on gigabit Ethernet.
run: build
	$(SMOL) simulate --model gpt2-small --cluster pi5-1gbe --nodes 4 --strategy ddp --trace out/trace.json --force
	$(SMOL) plot timeline out/trace.json -o out/timeline.png --force

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

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
	rm -rf $(BUILD) out
