#include "real_nccl.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sched.h>
#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "shim_config.h"

// The directory of the libnccl found when this library was configured (the CUDA toolkit's, as a rule): one
// place of the search for the real library (open_real below).
#ifndef SYMCOMM_NCCL_SHIM_TOOLKIT_LIBDIR
#define SYMCOMM_NCCL_SHIM_TOOLKIT_LIBDIR ""
#endif

namespace symcomm::nccl_shim {

namespace detail {
std::atomic<void*> g_targets[static_cast<int>(Target::kCount)];
char g_missing;
}  // namespace detail

namespace {

// NOTE [drop-in note]
// Every build of libsymcomm_nccl carries an ELF note (name "symcomm", type kShimNoteType) in a PT_NOTE
// segment, and never takes a library that carries it for the real NCCL: neither itself (found again through
// a symbolic link, or by a path naming its file: dlopen then returns this library's own handle) nor a copy of
// itself. A copy is a library of its own whose search could take this one for the real NCCL while this one
// takes the copy, and every call would go back and forth between the two without end. A mark that only the
// dynamic loader's tables and the ELF headers show is used rather than an exported symbol: the drop-in library
// exports the NCCL API and nothing else.
constexpr uint32_t kShimNoteType = 0x53594d43;  // "SYMC"
struct ShimNote {
  uint32_t namesz;
  uint32_t descsz;
  uint32_t type;
  char name[8];
  uint32_t desc;
};
[[gnu::section(".note.symcomm"), gnu::used, gnu::aligned(4)]] const ShimNote kShimNote = {8, 4, kShimNoteType,
                                                                                          "symcomm", 1};

struct NoteSearch {
  ElfW(Addr) base;
  bool found;
};

size_t round_up(size_t n, size_t align) { return (n + align - 1) / align * align; }

int find_shim_note(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<NoteSearch*>(data);
  if (info->dlpi_addr != search->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;  // ELF notes: 4-byte fields, 8 in 8-aligned note segments
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* const end = p + ph.p_memsz;
    while (static_cast<size_t>(end - p) >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const char* const name = p + sizeof note;
      const size_t name_span = round_up(note.n_namesz, align);
      const size_t desc_span = round_up(note.n_descsz, align);
      if (name_span + desc_span > static_cast<size_t>(end - name)) break;
      if (note.n_type == kShimNoteType && note.n_namesz == sizeof kShimNote.name &&
          std::memcmp(name, kShimNote.name, sizeof kShimNote.name) == 0) {
        search->found = true;
        return 1;
      }
      p = name + name_span + desc_span;
    }
  }
  return 1;
}

// Whether the loaded object `map` is a build of libsymcomm_nccl (NOTE [drop-in note]).
bool is_drop_in(const link_map* map) noexcept {
  if (map == nullptr) return false;
  NoteSearch search{map->l_addr, false};
  dl_iterate_phdr(find_shim_note, &search);
  return search.found;
}

bool handle_is_drop_in(void* handle) noexcept {
  link_map* map = nullptr;
  return dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && is_drop_in(map);
}

bool symbol_is_drop_in(void* symbol) noexcept {
  Dl_info info;
  link_map* map = nullptr;
  return dladdr1(symbol, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0 && is_drop_in(map);
}

// Appends printf-formatted text to a fixed buffer; cut short where it is full.
class Text {
 public:
  Text(char* buf, size_t cap) : buf_(buf), cap_(cap) { buf_[0] = '\0'; }
  [[gnu::format(printf, 2, 3)]] void add(const char* fmt, ...) {
    if (len_ + 1 >= cap_) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(buf_ + len_, cap_ - len_, fmt, ap);
    va_end(ap);
    if (n > 0) len_ = len_ + static_cast<size_t>(n) < cap_ ? len_ + static_cast<size_t>(n) : cap_ - 1;
  }
  const char* c_str() const { return buf_; }

 private:
  char* buf_;
  size_t cap_;
  size_t len_ = 0;
};

struct RealLibrary {
  void* handle;          ///< nullptr: there is none, and every call returns `failure`
  ncclResult_t failure;  ///< with handle == nullptr
  char path[PATH_MAX];
  char error[4096];  ///< with handle == nullptr: what ncclGetLastError returns
};

// The real library for the process lifetime, written once by the first call to have opened it (library()).
RealLibrary g_library;
enum : int { kUnset, kPublishing, kPublished };
std::atomic<int> g_library_state{kUnset};

enum class Refused { kNo, kDropIn, kOther };

// Opens `path` as the real NCCL; nullptr with the reason added to `why` where it is absent, does not load, is a
// drop-in library or is no NCCL.
void* try_open(const char* path, Text& why, Refused* refused) noexcept {
  *refused = Refused::kOther;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    why.add("%s", e != nullptr ? e : "dlopen failed");
    return nullptr;
  }
  if (handle_is_drop_in(h)) {  // NOTE [drop-in note]
    dlclose(h);
    *refused = Refused::kDropIn;
    why.add("a symcomm NCCL drop-in library (this one or a copy), not NCCL");
    return nullptr;
  }
  if (dlsym(h, "pncclGetVersion") == nullptr && dlsym(h, "ncclGetVersion") == nullptr) {
    dlclose(h);
    why.add("exports no ncclGetVersion: not an NCCL library");
    return nullptr;
  }
  *refused = Refused::kNo;
  return h;
}

bool take(RealLibrary& lib, void* handle, const char* path) noexcept {
  lib.handle = handle;
  std::snprintf(lib.path, sizeof lib.path, "%s", path);
  return true;
}

// Where the real libnccl.so.2 is looked for when SYMCOMM_NCCL_REAL_LIBRARY is unset, after the directories of
// LD_LIBRARY_PATH: the toolkit's found at configure time, the CUDA toolkit's usual place, the distribution's
// library directories. dlopen("libnccl.so.2") is no substitute: the dynamic loader answers that name with the
// library already loaded under it, this one.
const char* const kSearchDirs[] = {
    SYMCOMM_NCCL_SHIM_TOOLKIT_LIBDIR,
    "/usr/local/cuda/lib64",
#if defined(__x86_64__)
    "/usr/lib/x86_64-linux-gnu",
#elif defined(__aarch64__)
    "/usr/lib/aarch64-linux-gnu",
#endif
    "/usr/lib64",
    "/usr/lib",
};

// Tries dir/libnccl.so.2 (dir: `len` characters); true when it was taken.
bool try_dir(RealLibrary& lib, const char* dir, size_t len, Text& tried) noexcept {
  if (len == 0) return false;
  char path[PATH_MAX];
  const int n = std::snprintf(path, sizeof path, "%.*s/libnccl.so.2", static_cast<int>(len), dir);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof path) return false;
  tried.add("; %s: ", path);
  if (access(path, F_OK) != 0) {
    tried.add("absent");
    return false;
  }
  Refused refused;
  void* h = try_open(path, tried, &refused);
  return h != nullptr && take(lib, h, path);
}

void open_real(RealLibrary& lib) noexcept {
  lib.handle = nullptr;
  const ShimConfig config = read_config();
  Text error(lib.error, sizeof lib.error);
  if (config.mode == Mode::kUnknown) {
    lib.failure = ncclInvalidUsage;
    error.add("symcomm NCCL drop-in: SYMCOMM_NCCL_SHIM='%s' is not one of forward|auto|native-only", config.mode_text);
    return;
  }
  if (config.mode != Mode::kForward && !kHasNative) {
    lib.failure = ncclInvalidUsage;
    error.add(
        "symcomm NCCL drop-in: SYMCOMM_NCCL_SHIM=%s is not available: this build (without symcomm's CUDA "
        "backend) forwards every call to the real NCCL (SYMCOMM_NCCL_SHIM=forward, the default)",
        mode_name(config.mode));
    return;
  }
  if (config.bad_variable != nullptr) {
    lib.failure = ncclInvalidUsage;
    error.add("symcomm NCCL drop-in: %s is not %s", config.bad_variable, config.bad_expected);
    return;
  }
  if (*config.real_library != '\0') {
    error.add("symcomm NCCL drop-in: cannot forward to SYMCOMM_NCCL_REAL_LIBRARY=%s: ", config.real_library);
    Refused refused;
    if (void* h = try_open(config.real_library, error, &refused)) {
      take(lib, h, config.real_library);
      return;
    }
    lib.failure = refused == Refused::kDropIn ? ncclInvalidUsage : ncclSystemError;
    return;
  }
  char tried_buf[sizeof lib.error];
  Text tried(tried_buf, sizeof tried_buf);
  for (const char* dir = config.library_path; *dir != '\0';) {
    const char* colon = std::strchr(dir, ':');
    const size_t len = colon != nullptr ? static_cast<size_t>(colon - dir) : std::strlen(dir);
    if (try_dir(lib, dir, len, tried)) return;
    dir += colon != nullptr ? len + 1 : len;
  }
  for (const char* dir : kSearchDirs) {
    if (try_dir(lib, dir, std::strlen(dir), tried)) return;
  }
  lib.failure = ncclSystemError;
  error.add(
      "symcomm NCCL drop-in: found no NCCL to forward to (set SYMCOMM_NCCL_REAL_LIBRARY to the path of the "
      "real libnccl.so.2); tried%s",
      *tried.c_str() != '\0' ? tried.c_str() + 1 : " nothing");
}

// The real library, opened by the first call that needs it. Without a lock across the opening: threads that
// race to open it each search, find the same library (dlopen counts the references) and the first to claim
// g_library copies its answer there; the others close their reference and wait for that copy, which takes no
// lock and makes no call. A lock held across dlopen could deadlock with a thread that holds the dynamic
// loader's lock (running a library's constructor) and calls NCCL.
const RealLibrary& library() noexcept {
  if (g_library_state.load(std::memory_order_acquire) == kPublished) return g_library;
  RealLibrary mine{};
  open_real(mine);
  int state = kUnset;
  if (g_library_state.compare_exchange_strong(state, kPublishing, std::memory_order_acquire)) {
    g_library = mine;
    g_library_state.store(kPublished, std::memory_order_release);
    return g_library;
  }
  if (mine.handle != nullptr) dlclose(mine.handle);
  while (g_library_state.load(std::memory_order_acquire) != kPublished) sched_yield();
  return g_library;
}

struct Names {
  const char* primary;
  const char* fallback;  ///< nullptr: none
};

// Each target's names in the real library: pncclX (NCCL's own definition; ncclX is its weak alias), else ncclX.
// clang-format off
constexpr Names kNames[] = {
#define SYMCOMM_NCCL_TARGET_NAMES(Ret, Name, Params, Args) {"pnccl" #Name, "nccl" #Name},
    SYMCOMM_NCCL_API(SYMCOMM_NCCL_TARGET_NAMES)
#undef SYMCOMM_NCCL_TARGET_NAMES
    {"pncclGetErrorString", "ncclGetErrorString"},
    {"pncclGetLastError", "ncclGetLastError"},
    {"ncclResetDebugInitInternal", nullptr},
};
// clang-format on
static_assert(std::size(kNames) == static_cast<size_t>(Target::kCount));

// The calling thread's last error of the drop-in library's own (shim_error()), and the text it points to where
// it names a function.
thread_local const char* t_error = nullptr;
thread_local char t_text[1024];

}  // namespace

namespace detail {

void* resolve(Target t, Failure* why) noexcept {
  why->target = t;
  const RealLibrary& lib = library();
  if (lib.handle == nullptr) {
    why->code = lib.failure;
    return nullptr;
  }
  std::atomic<void*>& slot = g_targets[static_cast<int>(t)];
  void* f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    const Names& names = kNames[static_cast<int>(t)];
    f = dlsym(lib.handle, names.primary);
    if (f == nullptr && names.fallback != nullptr) f = dlsym(lib.handle, names.fallback);
    // A dependency of the real library that is a drop-in library would send the call back here.
    if (f == nullptr || symbol_is_drop_in(f)) f = &g_missing;  // NOTE [drop-in note]
    slot.store(f, std::memory_order_release);
  }
  if (f == &g_missing) {
    why->code = ncclSystemError;
    return nullptr;
  }
  return f;
}

}  // namespace detail

void record_failure(const Failure& why) noexcept {
  const RealLibrary& lib = library();
  if (lib.handle == nullptr) {
    t_error = lib.error;
    return;
  }
  if (why.target == Target::kCount) {
    t_error = "symcomm NCCL drop-in: the call could not be forwarded";
    return;
  }
  const Names& names = kNames[static_cast<int>(why.target)];
  Text text(t_text, sizeof t_text);
  text.add(
      "symcomm NCCL drop-in: the real NCCL (%s) has no function %s%s%s (or it resolves to a symcomm NCCL "
      "drop-in library)",
      lib.path, names.primary, names.fallback != nullptr ? " or " : "",
      names.fallback != nullptr ? names.fallback : "");
  t_error = t_text;
}

const char* shim_error() noexcept { return t_error; }

void record_text(const char* text) noexcept {
  Text out(t_text, sizeof t_text);
  out.add("%s", text);
  t_error = t_text;
}

void clear_shim_error() noexcept { t_error = nullptr; }

}  // namespace symcomm::nccl_shim
