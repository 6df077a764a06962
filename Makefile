# SPDX-License-Identifier: Apache-2.0
# The README's commands. Every target that builds first runs `deps`, so a fresh
# Debian 12 machine needs nothing else.
#   make deps    install the Debian packages in scripts/packages.txt (idempotent)
#   make demo    deps + build + the main job
#   make test    deps + build + ctest, in the normal build, the ASan/UBSan build and the
#                ThreadSanitizer build (label tsan), then each libFuzzer target for
#                FUZZ_SECONDS (when clang has libFuzzer)
#   make bench   deps + build + every benchmark (BENCH=name for one)
#   make peers   the peers' venv for benchmarks and interop tests (benchmarks/peers/setup.sh:
#                pinned gymnasium, envpool, pufferlib-core, torch 2, SB3, tensorboard,
#                safetensors in SHOAL_PEERS_VENV, default ~/.cache/shoal-peers; idempotent)
#   make python PREFIX=DIR  build libshoal.so and install the Python package shoal
#                into a virtual environment or an install prefix (python/install.sh);
#                `pip install .` builds and installs it on its own (docs/install.md)
#   cmake --install build --prefix P  the programs, libshoal, headers, pkg-config and
#                CMake package files into P (docs/install.md)
#   make format / make format-check
BUILD     ?= build
SAN_BUILD ?= build-san
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 15
JOBS      ?= $(shell nproc)
CMAKE_FLAGS ?=
# ctest selection, e.g. CTEST_ARGS="-L unit" or "-LE slow"
CTEST_ARGS ?=
# Tests labelled slow (long training runs) or slurm (a private Slurm cluster whose runs
# must solve in a bounded time) are run in the normal build only.
SAN_CTEST_ARGS ?= -LE 'slow|slurm'
# ThreadSanitizer runs the tests labelled tsan (cmake/shoal.cmake's SHOAL_TSAN_TESTS
# says which and why): those that drive shoal's threads. The rest have no threads of
# shoal's, or bound memory or time in ways TSan's 5-15x cost breaks; all of them keep
# running in the two builds above. About 5 minutes on 2 cores, build included.
TSAN_CTEST_ARGS ?= -L tsan -LE 'slow|slurm'

SOURCES = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)

.PHONY: deps build build-san build-tsan build-fuzz demo test test-normal test-san test-tsan test-fuzz bench peers python format format-check clean

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer. CUDA is left out: its host code
# is the same C, and nvcc does not take the sanitizer flags. -O1 with asserts on, as
# ASan's authors advise: the suite runs in 0.55 of its -O0 time (380 against 684 s on
# 2 cores). Warnings stay warnings here: GCC 12 at -O1 with the sanitizers' checks
# inlined reports truncations that cannot happen; the normal build is the -Werror gate.
build-san: deps
	cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
	  -DSHOAL_WERROR=OFF -DSHOAL_SANITIZE=address,undefined \
	  -DSHOAL_CUDA=OFF -DSHOAL_BENCHMARKS=OFF $(CMAKE_FLAGS)
	cmake --build $(SAN_BUILD) -j $(JOBS)

# ThreadSanitizer. Optimised (TSan at -O0 runs the tests several times slower), CUDA
# and benchmarks left out as in build-san.
build-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=thread \
	  -DSHOAL_CUDA=OFF -DSHOAL_BENCHMARKS=OFF $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)

# tests/fuzz's targets with clang's libFuzzer, ASan and UBSan (only those targets are
# built). Where clang lacks libFuzzer this says so and does nothing: the gcc builds
# replay the committed corpora anyway. (Checked in the recipe: deps may install clang.)
HAVE_LIBFUZZER = echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
  clang -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1

build-fuzz: deps
	@if ! $(HAVE_LIBFUZZER); then echo "build-fuzz: clang with libFuzzer not found; skipped"; else \
	  set -x; CC=clang cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DSHOAL_FUZZ=ON -DSHOAL_FUZZ_SECONDS=$(FUZZ_SECONDS) -DSHOAL_SANITIZE=address,undefined \
	    -DSHOAL_CUDA=OFF -DSHOAL_BENCHMARKS=OFF $(CMAKE_FLAGS) && \
	  cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz; fi

demo: build
	@scripts/demo.sh $(BUILD)

test: test-normal test-san test-tsan test-fuzz

test-normal: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-san: build-san
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) $(SAN_CTEST_ARGS) $(CTEST_ARGS)

# A report fails its test: halt_on_error exits non-zero at the first one, and
# second_deadlock_stack prints both stacks of a lock-order inversion. tests/tsan.supp
# lists reports inside uninstrumented third-party libraries only (gRPC, Abseil,
# OpenSSL, libmongoc). OPENBLAS_NUM_THREADS=1: OpenBLAS's own uninstrumented worker
# threads would report races among themselves; shoal's threads are what is under test.
test-tsan: build-tsan
	cd $(TSAN_BUILD) && OPENBLAS_NUM_THREADS=1 \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) $(TSAN_CTEST_ARGS) $(CTEST_ARGS)

# Each fuzz target for FUZZ_SECONDS from the committed seeds (label fuzz).
test-fuzz: build-fuzz
	@if $(HAVE_LIBFUZZER); then cd $(FUZZ_BUILD) && ctest --output-on-failure -j $(JOBS) -L fuzz; fi

bench: build
	@scripts/bench.sh $(BUILD) $(BENCH)

# Nothing of the build or of `make test` needs it: the tests using it skip without it.
peers:
	@benchmarks/peers/setup.sh

python: build
	@python/install.sh $(BUILD) "$(PREFIX)"

format:
	clang-format -i $(SOURCES)

format-check:
	clang-format --dry-run -Werror $(SOURCES)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
