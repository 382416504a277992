# dtensor: the two commands a new user needs are `make demo` and `make test`.
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test unit asan demo bench clean

all: build

deps:
	@scripts/install-deps.sh

# Release build of the library, the CLI, the tests and the benchmarks into build/.
build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build build -j $(JOBS)

# The whole suite through ctest, then the unit tests again under ASan + UBSan.
test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)
	$(MAKE) asan

asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDTENSOR_SANITIZE=ON \
	  -DDTENSOR_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS) -L unit

# Runs the main job as it exists today (see scripts/demo.sh).
demo: build
	@scripts/demo.sh

bench: build
	build/dtensor bench collectives --ranks 4 --bytes 67108864 --json

clean:
	rm -rf build build-asan
