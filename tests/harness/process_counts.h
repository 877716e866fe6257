#pragma once
// What this process holds, counted from /proc, for the leak tests (host and GPU lifecycle tests).

#include <dirent.h>

#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

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

/// NOTE [thread counts] A thread that was just joined can still be listed in /proc/self/task: pthread_join
/// returns once the kernel clears the thread's tid, early in its exit, and the task leaves the list only when
/// it is released at the end of that exit (longer when the machine is busy). On a loaded machine (CI, or CPU
/// hogs beside the tests) this shows as one thread more than the truth on both ranks, in the count before
/// the cycles (then "after" is one less) or after them. So the count before waits for the list to stand still,
/// the count after waits (2 s at most) to fall to the count before, and a leak check asks for no more
/// threads after than before: a leaked thread stays, an exiting one goes.

/// Counts this process's threads every 5 ms until done(count) (2 s at most; NOTE [thread counts]).
template <class Done>
int poll_thread_count(Done done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int n = count_dir("/proc/self/task");
  while (!done(n) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = count_dir("/proc/self/task");
  }
  return n;
}

/// Threads of this process once /proc/self/task has not changed for 50 ms.
inline int count_threads_stable() {
  int last = -1, same = 0;
  return poll_thread_count([&](int n) {
    same = n == last ? same + 1 : 0;
    last = n;
    return same >= 10;
  });
}

/// Threads of this process, once the count has fallen to `at_most`.
inline int count_threads_settled(int at_most) {
  return poll_thread_count([at_most](int n) { return n <= at_most; });
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
