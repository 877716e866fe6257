// Environment variables set for a test's lifetime: each one is restored (or unset again) when the object
// goes, pass or fail.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace symcomm::testing {

// Sets (or, with nullopt, unsets) one environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) previous_ = std::string(old);
    apply(value);
  }
  ~ScopedEnv() { apply(previous_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void apply(const std::optional<std::string>& value) {
    int rc = value ? ::setenv(name_.c_str(), value->c_str(), 1) : ::unsetenv(name_.c_str());
    EXPECT_EQ(rc, 0) << "cannot set " << name_;
  }

  std::string name_;
  std::optional<std::string> previous_;
};

// Several variables at once; each one is restored by its own ScopedEnv.
class ScopedEnvSet {
 public:
  ScopedEnvSet(const std::vector<std::pair<std::string, std::optional<std::string>>>& vars) {
    for (const auto& [name, value] : vars) vars_.push_back(std::make_unique<ScopedEnv>(name, value));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> vars_;
};

}  // namespace symcomm::testing
