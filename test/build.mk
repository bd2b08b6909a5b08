# The test harness main() (test/test_main.cpp) is compiled by the generic rule; each folder's
# build.mk links its own test programs against $(TEST_MAIN) and adds them to TESTS.

# The parsers' fuzzers, a few seconds each (test/fuzz/test_fuzz.sh, built by clang with its own
# sanitizers into build-fuzz/): in the plain build only, so they run once per suite.
ifneq ($(SAN),1)
  TESTS += test/fuzz/test_fuzz.sh
endif
