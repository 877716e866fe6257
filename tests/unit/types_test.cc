#include "symcomm/types.h"

#include <gtest/gtest.h>

#include "symcomm/config.h"
#include "symcomm/error.h"

namespace symcomm {
namespace {

TEST(Types, NamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto d = static_cast<DataType>(i);
    EXPECT_EQ(parse_dtype(to_string(d)), d);
    EXPECT_GT(dtype_size(d), 0u);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  }
  for (int i = 0; i < kNumCollectives; ++i) {
    auto c = static_cast<Collective>(i);
    EXPECT_EQ(parse_collective(to_string(c)), c);
  }
  EXPECT_EQ(parse_dtype("bf16"), DataType::kBFloat16);
  EXPECT_EQ(parse_dtype("nope"), std::nullopt);
  EXPECT_FALSE(is_valid(static_cast<DataType>(200)));
  EXPECT_EQ(to_string(static_cast<ReduceOp>(77)), "invalid");
}

TEST(Config, EnvHelpListsEveryVariable) {
  std::string help = Config::env_help();
  EXPECT_NE(help.find("SYMCOMM_TIMEOUT_MS"), std::string::npos);
  EXPECT_NE(help.find("SYMCOMM_LOG"), std::string::npos);
}

}  // namespace
}  // namespace symcomm
