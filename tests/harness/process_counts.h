#pragma once
// What this process holds, counted from /proc, for the leak tests (host and GPU lifecycle tests).

#include <dirent.h>

#include <fstream>
#include <string>
#include <string_view>

namespace symcomm::testing {

/// Entries of a /proc directory (e.g. /proc/self/fd, /proc/self/task), "." and ".." included.
inline int count_dir(const char* path) {
  int n = 0;
  if (DIR* d = ::opendir(path)) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

/// Lines of /proc/self/maps that contain `needle` (every line when it is empty).
inline int count_maps(std::string_view needle = {}) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace symcomm::testing
