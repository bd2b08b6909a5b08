# The test harness main() (test/test_main.cpp) is compiled by the generic rule; each folder's
# build.mk links its own test programs against $(TEST_MAIN) and adds them to TESTS.
