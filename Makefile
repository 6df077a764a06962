# The README's commands. Every target that builds first runs `deps`, so a fresh
# Debian 12 machine needs nothing else.
#   make deps    install the Debian packages in scripts/packages.txt (idempotent)
#   make demo    deps + build + the main job
#   make test    deps + build + ctest, in the normal build and the sanitizer build
#   make bench   deps + build + every benchmark (BENCH=name for one)
#   make python PREFIX=DIR  build libshoal.so and install the Python package shoal
#                into a virtual environment or an install prefix (python/install.sh)
#   make format / make format-check
BUILD     ?= build
SAN_BUILD ?= build-san
JOBS      ?= $(shell nproc)
CMAKE_FLAGS ?=
# ctest selection, e.g. CTEST_ARGS="-L unit" or "-LE slow"
CTEST_ARGS ?=
# Tests labelled slow (long training runs) are run in the normal build only.
SAN_CTEST_ARGS ?= -LE slow

SOURCES = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)

.PHONY: deps build build-san demo test test-normal test-san bench python format format-check clean

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer. CUDA is left out: its host code
# is the same C, and nvcc does not take the sanitizer flags.
build-san: deps
	cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSHOAL_SANITIZE=address,undefined \
	  -DSHOAL_CUDA=OFF -DSHOAL_BENCHMARKS=OFF $(CMAKE_FLAGS)
	cmake --build $(SAN_BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: test-normal test-san

test-normal: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-san: build-san
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) $(SAN_CTEST_ARGS) $(CTEST_ARGS)

bench: build
	@scripts/bench.sh $(BUILD) $(BENCH)

python: build
	@python/install.sh $(BUILD) "$(PREFIX)"

format:
	clang-format -i $(SOURCES)

format-check:
	clang-format --dry-run -Werror $(SOURCES)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
