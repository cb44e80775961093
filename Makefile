# The two commands of the README:
#   make bundle   builds fagen and the runtime libraries (no tests, no GoogleTest, no SASS
#                 tools) and compiles specs/default.yaml into attn.fab (no GPU needed)
#   make test     builds fagen and runs every CPU test (unit, lit/FileCheck, nvcc compile of the
#                 templates for sm_80/sm_90a/sm_100a and of the GPU harnesses, bundle round
#                 trip and corruption, runtime without a driver, reproducible bundles,
#                 time-bounded fuzzing)
BUILD ?= build
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 20
JOBS ?= $(shell nproc)

.PHONY: deps deps-build build bundle test unit fuzz clean

deps:
	@scripts/install-deps test

deps-build:
	@scripts/install-deps build

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DFAGEN_BUILD_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

bundle: deps-build
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DFAGEN_BUILD_TESTS=OFF >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target fagen fagen_rt fagen_rt_static
	$(BUILD)/fagen build specs/default.yaml --arch sm_90a -o attn.fab

unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DFAGEN_BUILD_FUZZERS=ON -DFAGEN_BUILD_TESTS=OFF -DFAGEN_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fagen_spec_fuzzer fagen_bundle_fuzzer
	ctest --test-dir $(FUZZ_BUILD) --output-on-failure

test: fuzz unit

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
