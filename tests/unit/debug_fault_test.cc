// SYMCOMM_DEBUG_FAULT (testing only, src/base/debug_fault.h): which site and rank a setting arms.
#include "base/debug_fault.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace symcomm::detail {
namespace {

struct FaultEnv {
  explicit FaultEnv(const char* value) {
    if (value) {
      ::setenv("SYMCOMM_DEBUG_FAULT", value, 1);
    } else {
      ::unsetenv("SYMCOMM_DEBUG_FAULT");
    }
  }
  ~FaultEnv() { ::unsetenv("SYMCOMM_DEBUG_FAULT"); }
};

TEST(DebugFault, ArmsOnlyTheNamedSitesOnTheNamedRanks) {
  {
    FaultEnv unset(nullptr);
    EXPECT_FALSE(debug_fault("ce_setup", 0));
  }
  {
    FaultEnv one("ce_setup@1");
    EXPECT_TRUE(debug_fault("ce_setup", 1));
    EXPECT_FALSE(debug_fault("ce_setup", 0));
    EXPECT_FALSE(debug_fault("ce_setup", 11));
    EXPECT_FALSE(debug_fault("heap_import", 1));
    EXPECT_FALSE(debug_fault("ce_set", 1));
  }
  {
    FaultEnv two("heap_import@0,ce_setup@12");
    EXPECT_TRUE(debug_fault("heap_import", 0));
    EXPECT_TRUE(debug_fault("ce_setup", 12));
    EXPECT_FALSE(debug_fault("ce_setup", 1));
  }
  {
    FaultEnv malformed("ce_setup@,ce_setup@x1,ce_setup,@1,ce_setup@99999999999999999999");
    for (int r : {0, 1, 2147483647}) EXPECT_FALSE(debug_fault("ce_setup", r)) << r;
  }
}

}  // namespace
}  // namespace symcomm::detail
