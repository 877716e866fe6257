#include "bootstrap/store_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace symcomm::detail {
namespace {

constexpr size_t kRequestFixedBytes = 1 + 8 + 4 + 4 + 4;  // type, number, key count, two blob lengths
constexpr size_t kResponseFixedBytes = 1 + 8 + 4 + 4;     // status, number, two blob lengths

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_i64(Bytes& out, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}

void put_blob(Bytes& out, const void* data, size_t n) {
  put_u32(out, static_cast<uint32_t>(n));
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Writes the payload length into the 4 bytes reserved at the front of a frame.
Bytes finish_frame(Bytes frame) {
  uint32_t n = static_cast<uint32_t>(frame.size() - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(n >> (8 * i));
  return frame;
}

// Reads fields from a payload; the first failure sticks and later reads return zeros.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> in) : in_(in) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t remaining() const { return in_.size() - pos_; }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  uint8_t u8() { return take(1) ? in_[pos_ - 1] : 0; }
  uint32_t u32() { return take(4) ? load_u32(&in_[pos_ - 4]) : 0; }
  int64_t i64() {
    if (!take(8)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | in_[pos_ - 8 + i];
    return static_cast<int64_t>(v);
  }
  // A blob of at most max bytes; the length is checked against the limit and the bytes present before
  // anything is copied.
  std::span<const uint8_t> blob(size_t max, std::string_view what) {
    uint32_t n = u32();
    if (!ok()) return {};
    if (n > max) {
      fail(fmt::format("{} of {} bytes exceeds the limit of {} bytes", what, n, max));
      return {};
    }
    if (!take(n)) return {};
    return in_.subspan(pos_ - n, n);
  }

 private:
  bool take(size_t n) {
    if (!ok()) return false;
    if (remaining() < n) {
      fail(fmt::format("truncated message ({} bytes missing at offset {})", n - remaining(), pos_));
      return false;
    }
    pos_ += n;
    return true;
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

bool valid_request_type(uint8_t t) { return t >= 1 && t <= 10; }

// The fields each request type uses; unused ones must be empty so that junk is not silently accepted.
std::string check_request_shape(const Request& r) {
  using T = RequestType;
  size_t want_keys = r.type == T::kHello || r.type == T::kNumKeys ? 0 : 1;
  if (r.type == T::kWait) {
    if (r.keys.empty()) return "wait without keys";
  } else if (r.keys.size() != want_keys) {
    return fmt::format("{} carries {} keys, expected {}", to_string(r.type), r.keys.size(), want_keys);
  }
  bool uses_value = r.type == T::kHello || r.type == T::kSet || r.type == T::kCompareSet;
  if (!uses_value && !r.value.empty()) return fmt::format("{} carries an unexpected value", to_string(r.type));
  if (r.type != T::kCompareSet && !r.value2.empty()) {
    return fmt::format("{} carries an unexpected second value", to_string(r.type));
  }
  if (r.type == T::kHello && r.number != kStoreProtocolMagic) return "hello with a wrong protocol magic/version";
  if (r.type == T::kHello && r.value.size() > kMaxMessageBytes) return "token too long";
  if ((r.type == T::kGet || r.type == T::kWait) && r.number < 0) return "negative timeout";
  return {};
}

}  // namespace

std::string_view to_string(RequestType type) {
  switch (type) {
    case RequestType::kHello: return "hello";
    case RequestType::kSet: return "set";
    case RequestType::kGet: return "get";
    case RequestType::kTryGet: return "try_get";
    case RequestType::kAdd: return "add";
    case RequestType::kCompareSet: return "compare_set";
    case RequestType::kWait: return "wait";
    case RequestType::kCheck: return "check";
    case RequestType::kRemove: return "remove";
    case RequestType::kNumKeys: return "num_keys";
  }
  return "invalid";
}

size_t max_request_payload(const StoreLimits& limits) {
  size_t keys = std::max(limits.max_key_bytes + 4, kMaxKeySectionBytes);
  return kRequestFixedBytes + keys + 2 * limits.max_value_bytes;
}

size_t max_hello_payload() { return kRequestFixedBytes + kMaxMessageBytes; }

size_t max_response_payload(size_t max_value_bytes) { return kResponseFixedBytes + max_value_bytes + kMaxMessageBytes; }

Bytes encode_request(const Request& r) {
  Bytes out(kFrameHeaderBytes);
  out.reserve(kFrameHeaderBytes + kRequestFixedBytes + r.value.size() + r.value2.size() + 16 * r.keys.size());
  out.push_back(static_cast<uint8_t>(r.type));
  put_i64(out, r.number);
  put_u32(out, static_cast<uint32_t>(r.keys.size()));
  for (const std::string& k : r.keys) put_blob(out, k.data(), k.size());
  put_blob(out, r.value.data(), r.value.size());
  put_blob(out, r.value2.data(), r.value2.size());
  return finish_frame(std::move(out));
}

Bytes encode_response(const Response& r) {
  Bytes out(kFrameHeaderBytes);
  out.reserve(kFrameHeaderBytes + kResponseFixedBytes + r.value.size() + r.message.size());
  out.push_back(static_cast<uint8_t>(r.status));
  put_i64(out, r.number);
  put_blob(out, r.value.data(), r.value.size());
  // Messages are diagnostics: cut rather than refuse an over-long one.
  put_blob(out, r.message.data(), std::min(r.message.size(), kMaxMessageBytes));
  return finish_frame(std::move(out));
}

Decoded<Request> decode_request(std::span<const uint8_t> payload, const StoreLimits& limits) {
  Cursor in(payload);
  Request r;
  uint8_t type = in.u8();
  if (in.ok() && !valid_request_type(type)) in.fail(fmt::format("unknown request type {}", type));
  r.type = static_cast<RequestType>(type);
  r.number = in.i64();
  uint32_t key_count = in.u32();
  // Each key takes at least its 4-byte length, so a count the payload cannot hold is rejected before
  // reserving room for it.
  if (in.ok() && (key_count > kMaxKeysPerRequest || key_count > in.remaining() / 4)) {
    in.fail(fmt::format("key count {} is out of range", key_count));
  }
  if (in.ok()) r.keys.reserve(key_count);
  for (uint32_t i = 0; i < key_count && in.ok(); ++i) {
    auto k = in.blob(limits.max_key_bytes, "key");
    r.keys.emplace_back(k.begin(), k.end());
  }
  auto v1 = in.blob(limits.max_value_bytes, "value");
  r.value.assign(v1.begin(), v1.end());
  auto v2 = in.blob(limits.max_value_bytes, "value");
  r.value2.assign(v2.begin(), v2.end());
  if (in.ok() && in.remaining() != 0) in.fail(fmt::format("{} trailing bytes", in.remaining()));
  if (in.ok()) {
    if (std::string why = check_request_shape(r); !why.empty()) in.fail(std::move(why));
  }
  if (!in.ok()) return {std::nullopt, in.error()};
  return {std::move(r), {}};
}

Decoded<Response> decode_response(std::span<const uint8_t> payload, size_t max_value_bytes) {
  Cursor in(payload);
  Response r;
  uint8_t status = in.u8();
  if (in.ok() && status > static_cast<uint8_t>(ResponseStatus::kFatal)) {
    in.fail(fmt::format("unknown response status {}", status));
  }
  r.status = static_cast<ResponseStatus>(status);
  r.number = in.i64();
  auto v = in.blob(max_value_bytes, "value");
  r.value.assign(v.begin(), v.end());
  auto m = in.blob(kMaxMessageBytes, "message");
  r.message.assign(m.begin(), m.end());
  if (in.ok() && in.remaining() != 0) in.fail(fmt::format("{} trailing bytes", in.remaining()));
  if (!in.ok()) return {std::nullopt, in.error()};
  return {std::move(r), {}};
}

std::span<uint8_t> FrameReader::prepare(size_t n) {
  // Drop consumed frames first so the buffer holds at most one partial frame plus what is read now.
  if (start_ > 0) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  size_t old = buf_.size();
  buf_.resize(old + n);
  prepared_ = n;
  return std::span<uint8_t>(buf_).subspan(old);
}

void FrameReader::commit(size_t n) {
  // prepare() grew the buffer by prepared_ bytes; keep only those written.
  buf_.resize(buf_.size() - prepared_ + std::min(n, prepared_));
  prepared_ = 0;
}

FrameReader::Status FrameReader::next(std::span<const uint8_t>* payload, size_t* payload_bytes) {
  if (buffered() < kFrameHeaderBytes) return Status::kNeedMore;
  size_t n = load_u32(&buf_[start_]);
  if (payload_bytes != nullptr) *payload_bytes = n;
  if (n > max_payload_) return Status::kOversized;
  if (buffered() < kFrameHeaderBytes + n) return Status::kNeedMore;
  *payload = std::span<const uint8_t>(buf_).subspan(start_ + kFrameHeaderBytes, n);
  start_ += kFrameHeaderBytes + n;
  return Status::kFrame;
}

bool constant_time_equal(std::string_view presented, std::string_view expected) {
  // Walks the whole expected secret whatever the input, accumulating differences without branching on them.
  volatile uint8_t diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    uint8_t p = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    diff = diff | (p ^ static_cast<uint8_t>(expected[i]));
  }
  return diff == 0;
}

}  // namespace symcomm::detail
