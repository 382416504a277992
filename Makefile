# dtensor: the two commands a new user needs are `make demo` and `make test`.
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60
# The three sanitizer builds (asan, tsan, fuzz) compile their sources in unity batches of 8 files
# (CMake's UNITY_BUILD): each batch parses the headers and instantiates the templates it shares once,
# not once per file. Measured on 2 cores under ASan: 8 files of dtensor/ir/ 93 s one by one, 47 s as
# one batch. It is what keeps CI inside its time (the ASan build took 33 of CI's ~95 minutes on a
# slow host). So names private to a .cc (anonymous namespaces, statics) must differ within a target.
# The release build (make build) compiles file by file, so an edit rebuilds one file.
UNITY ?= ON
# They also build with Ninja: given several targets it schedules them as one graph, where CMake's
# Makefiles build one named target after another (.NOTPARALLEL), which leaves a core idle behind
# every target of one or two unity batches. A directory configured earlier with another generator
# is started again.
define ninja_dir
	@if [ -f $(1)/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $(1)/CMakeCache.txt; then \
	  echo "$(1): configured with another generator, starting it again"; rm -rf $(1); fi
endef
FUZZ_HARNESSES = ir_text safetensors plan_json interpreter onnx
# The ThreadSanitizer job: the comm, runtime and launcher tests (scripts/tsan.sh runs them).
TSAN_TESTS = comm_threads_test comm_fault_test comm_collectives_test comm_symmetric_arena_test \
             launcher_test runtime_trace_test eager_async_test parallel_test

.PHONY: all deps build test unit asan fuzz tsan demo bench clean

all: build

deps:
	@scripts/install-deps.sh

# Release build of the library, the CLI, the tests and the benchmarks into build/.
build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build build -j $(JOBS)

# The whole suite through ctest (the Python module's pytest suite too: python_test), then the unit
# tests again under ASan + UBSan, the threaded tests under TSan, and every fuzz harness for
# FUZZ_SECONDS.
test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)
	$(MAKE) asan
	$(MAKE) tsan
	$(MAKE) fuzz

# Only the unit tests run under ASan, so only their executables are built there (each unit test's
# target is named like the test: dtensor_add_unit_test in CMakeLists.txt). -O1 rather than -O0:
# the sanitizers see the same errors, the tests run 2-3x faster (train_pipeline_test 132 -> 47 s); asserts stay on.
# -g1 (line tables, which is what the sanitizers' stack traces print) rather than -g: a file compiles
# in about 3/4 of the time (interpreter.cc 9.1-10.0 -> 7.1 s, ops_attention_test.cc 7.5-7.9 -> 5.4-5.8 s).
# For gdb with locals: make asan CMAKE_FLAGS='-DCMAKE_CXX_FLAGS_DEBUG="-O1 -g"'.
asan: deps
	$(call ninja_dir,build-asan)
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDTENSOR_SANITIZE=ON \
	  -DDTENSOR_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=$(UNITY) $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-asan -j $(JOBS) \
	  --target $$(ctest --test-dir build-asan -N -L unit | awk '$$1 == "Test" && $$2 ~ /^#/ {print $$3}')
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS) -L unit

# libFuzzer harnesses (fuzz/), built with clang under ASan + UBSan, each run for FUZZ_SECONDS
# (two at a time); prints the executions per harness; a crash fails (input in build-fuzz/fuzz-artifacts/).
fuzz: deps
	$(call ninja_dir,build-fuzz)
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only \
	  -DCMAKE_CXX_COMPILER=clang++ -DDTENSOR_FUZZ=ON -DDTENSOR_WITH_MPI=OFF -DDTENSOR_BUILD_BENCH=OFF \
	  -DCMAKE_UNITY_BUILD=$(UNITY) $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_HARNESSES))
	scripts/fuzz.sh run build-fuzz $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

# ThreadSanitizer build of the threaded tests only (TSAN_TESTS), then scripts/tsan.sh runs them.
tsan: deps
	$(call ninja_dir,build-tsan)
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
	  -DDTENSOR_TSAN=ON -DDTENSOR_WITH_MPI=OFF -DDTENSOR_BUILD_BENCH=OFF \
	  -DCMAKE_UNITY_BUILD=$(UNITY) $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TESTS)
	scripts/tsan.sh build-tsan

# Runs the main job as it exists today (see scripts/demo.sh).
demo: build
	@scripts/demo.sh

bench: build
	build/dtensor bench collectives --ranks 4 --bytes 67108864 --json

clean:
	rm -rf build build-asan build-fuzz build-tsan
