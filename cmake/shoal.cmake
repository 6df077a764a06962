# SPDX-License-Identifier: Apache-2.0
# Build helpers shared by every part.

find_package(PkgConfig)
# The tests of the MongoDB backend link libmongoc themselves (tests/mongo_test.h).
if(PKG_CONFIG_FOUND AND NOT SHOAL_ONLY_NN)
  pkg_check_modules(SHOAL_TEST_MONGOC QUIET IMPORTED_TARGET libmongoc-1.0)
endif()

# Warnings: -Wall -Wextra -Werror, with these exceptions:
#  -Wno-unused-parameter: vtable implementations (layers, envs, backends) take
#   parameters that some members do not use.
#  -Wno-missing-field-initializers: protobuf-c's __INIT macros and designated
#   initialisers that rely on zero-filling.
#  -Wshadow=local is gcc's; clang has no such level of -Wshadow, so it goes without.
set(SHOAL_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
    -Wformat=2 -Wvla $<$<C_COMPILER_ID:GNU>:-Wshadow=local>)
if(SHOAL_WERROR)
  list(APPEND SHOAL_WARNINGS -Werror)
endif()

if(SHOAL_SANITIZE)
  string(REPLACE "," ";" _san_list "${SHOAL_SANITIZE}")
  foreach(_s IN LISTS _san_list)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "SHOAL_SANITIZE: unknown sanitizer '${_s}'")
    endif()
  endforeach()
  # Stop at the first UB report so a sanitizer finding fails the test.
  add_compile_options(-fsanitize=${SHOAL_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${SHOAL_SANITIZE})
  # GCC 12 with -fsanitize=thread at -O2 reports a stringop-overflow that cannot
  # happen (envs/minatar.c's bounded sq_push, reached through a ternary pointer);
  # the other builds keep the warning.
  if("thread" IN_LIST _san_list AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-stringop-overflow)
  endif()
endif()

# SHOAL_FUZZ: tests/fuzz's targets linked with clang's libFuzzer (run for
# SHOAL_FUZZ_SECONDS each by ctest, label fuzz); every library gets the coverage
# instrumentation they need. Use with CC=clang and SHOAL_SANITIZE=address,undefined.
option(SHOAL_FUZZ "Build tests/fuzz with libFuzzer (clang)" OFF)
set(SHOAL_FUZZ_SECONDS 15 CACHE STRING "Seconds each libFuzzer target runs under ctest")
if(SHOAL_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SHOAL_FUZZ needs clang (CC=clang): libFuzzer is clang's")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# shoal_add_library(NAME name SOURCES ... [DEPS targets...] [PRIVATE_DEPS ...])
# A static, position-independent library libshoal_<name>, with the repository root
# on the include path so headers are included as "part/part.h".
function(shoal_add_library)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(shoal_${A_NAME} STATIC ${A_SOURCES})
  target_include_directories(shoal_${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(shoal_${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:C>:${SHOAL_WARNINGS}>)
  target_link_libraries(shoal_${A_NAME} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
endfunction()

# shoal_add_program(NAME name SOURCES ... [DEPS ...])
function(shoal_add_program)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:C>:${SHOAL_WARNINGS}>)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()

# The tests `make test-tsan` runs under ThreadSanitizer (label tsan): those that drive
# shoal's own threads (rpc server and client, replay's concurrent inserts, the store
# writer, data's stream reader, the vector env, follow, supervise, the learner's eval
# and lease threads through the actor, apex, on-policy, live, sweep and fault tests; nn's
# thread pool through test_nn_layers). Left out: tests without threads, the slow ones, the
# MongoDB ones (libmongoc's uninstrumented threads, and forks of a threaded process,
# which TSan does not support), those that bound RSS (TSan's shadow memory breaks the
# bound: replay_spill, malicious, store_dataset), test_faults_ingest (its throughput
# floor) and test_media (its eval render runs past the 120 s limit under TSan).
set(SHOAL_TSAN_TESTS
    test_common_file test_replay_concurrent test_replay_limit test_replay_limiter
    test_replay_traj test_rpc test_store_writer test_store_file test_follow test_supervise
    test_rlog test_actor test_apex test_onpolicy_dist test_faults_net test_faults_actors
    test_data test_envs test_onpolicy_train test_workflow_live test_workflow_sweep
    test_faults_store test_faults_lease test_nn_layers)

# shoal_add_test(NAME name SOURCES ... [DEPS ...] [LABELS unit|integration|gpu|slow ...]
#                [TIMEOUT seconds] [ARGS ...])
# A cmocka test program tests/<name>, registered with ctest as <name>. Every test has
# a bounded time (default 120 s). Tests run from the build directory with
# SHOAL_SOURCE_DIR and SHOAL_BINARY_DIR set, so they find fixtures and programs.
function(shoal_add_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT SHOAL_TESTS)
    return()
  endif()
  if(NOT TARGET shoal_cmocka)
    message(FATAL_ERROR "shoal_add_test(${A_NAME}): cmocka was not found")
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(A_NAME IN_LIST SHOAL_TSAN_TESTS)
    list(APPEND A_LABELS tsan)
  endif()
  shoal_add_program(NAME ${A_NAME} SOURCES ${A_SOURCES} DEPS ${A_DEPS} shoal_cmocka)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} ${A_ARGS} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  # A test that prints SKIPPED and returns 77 counts as skipped, not passed.
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
    SKIP_RETURN_CODE 77
    ENVIRONMENT "SHOAL_SOURCE_DIR=${PROJECT_SOURCE_DIR};SHOAL_BINARY_DIR=${PROJECT_BINARY_DIR}")
  # ARGS mongodb: a test of the MongoDB backend.
  if("mongodb" IN_LIST A_ARGS)
    shoal_mongodb_test(${A_NAME})
  endif()
endfunction()

# shoal_mongodb_test(name): test <name> (of this directory) needs a MongoDB server: ctest's
# fixture mongo_standin (tests/mongo_standin) starts the stand-in for it unless
# $SHOAL_TEST_MONGO_URI names a server; tests/mongo_test.h finds either. Its program, when
# it is a target, links libmongoc and gets SHOAL_TEST_MONGOC.
function(shoal_mongodb_test name)
  if(TARGET ${name} AND TARGET PkgConfig::SHOAL_TEST_MONGOC)
    target_link_libraries(${name} PRIVATE PkgConfig::SHOAL_TEST_MONGOC)
    target_compile_definitions(${name} PRIVATE SHOAL_TEST_MONGOC=1)
  endif()
  set_property(TEST ${name} APPEND PROPERTY FIXTURES_REQUIRED mongo_standin)
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
    "SHOAL_TEST_MONGO_URI_FILE=${PROJECT_BINARY_DIR}/mongo_standin/uri")
endfunction()

# shoal_add_bench(NAME name SOURCES ... [DEPS ...])
# A benchmark program benchmarks/<name>; `make bench BENCH=<name>` runs one.
function(shoal_add_bench)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  if(NOT SHOAL_BENCHMARKS)
    return()
  endif()
  shoal_add_program(NAME bench_${A_NAME} SOURCES ${A_SOURCES} DEPS ${A_DEPS})
  set_target_properties(bench_${A_NAME} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/benchmarks OUTPUT_NAME ${A_NAME})
endfunction()

# cmocka (Debian's libcmocka-dev) as one imported target.
if(SHOAL_TESTS AND PkgConfig_FOUND)
  pkg_check_modules(CMOCKA IMPORTED_TARGET cmocka)
  if(CMOCKA_FOUND)
    add_library(shoal_cmocka INTERFACE)
    target_link_libraries(shoal_cmocka INTERFACE PkgConfig::CMOCKA)
  endif()
endif()
if(SHOAL_TESTS AND NOT TARGET shoal_cmocka)
  message(WARNING "cmocka not found: tests are not built (run `make deps`)")
  set(SHOAL_TESTS OFF)
endif()

# Debian's python3 with torch, numpy and grpcio: references in tests and benchmarks.
# A Python found first on PATH (pyenv, a venv) may lack them, so prefer /usr/bin.
find_program(SHOAL_PYTHON NAMES python3 HINTS /usr/bin NO_CACHE)

# The public headers: installed under PREFIX/include/shoal (included as "nn/nn.h"), and
# every function they declare is exported by libshoal (lib/CMakeLists.txt). Those they
# include are listed too, so an installed header finds what it includes.
set(SHOAL_PUBLIC_HEADERS common/shoal.h nn/nn.h envs/envs.h store/store.h store/store_data.h
    store/store_segments.h store/store_writer.h python/shoal_c.h)
