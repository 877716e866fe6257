#pragma once
// Files in a directory of their own under /tmp, removed with it: tuning and topology files written by a test
// (in the parent, before the ranks fork, for the multi-process tests).

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace symcomm::testing {

class TempFiles {
 public:
  TempFiles() {
    char tmpl[] = "/tmp/symcomm-test-files-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    dir_ = dir ? dir : "";
  }
  ~TempFiles() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;
  /// Writes `text` to `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace symcomm::testing
