// The test engine and main() of qsp_actor_tests (CAF 0.17: exactly one
// translation unit includes unit_test_impl.hpp).
#define CAF_SUITE actor_tests_main
#include "caf/test/unit_test_impl.hpp"
