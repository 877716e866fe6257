#pragma once
// expect_error: runs a call that must throw symcomm::Error with a given code, and returns the error for further
// checks (its ranks, its message).

#include <gtest/gtest.h>

#include "symcomm/error.h"

namespace symcomm::testing {

/// Runs `fn`, expects it to throw symcomm::Error with `code`; returns it (an Error of kInternal, after a test
/// failure, when nothing was thrown).
template <class Fn>
Error expect_error(ErrorCode code, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "got: " << e.what();
    return e;
  }
  ADD_FAILURE() << "expected an error with code " << to_string(code) << ", none was thrown";
  return Error(ErrorCode::kInternal, "no error");
}

}  // namespace symcomm::testing
