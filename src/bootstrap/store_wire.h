#pragma once
// Wire protocol of the TCP store (src/bootstrap/tcp_store_{server,client}.cc).
//
// NOTE [store wire format]
// Every message is a frame: a 4-byte little-endian payload length, then the payload. Integers are
// little-endian; a "blob" is a u32 length followed by that many bytes.
//
//   request  payload: u8 type | i64 number | u32 key_count | key_count blobs (keys) | blob value | blob value2
//   response payload: u8 status | i64 number | blob value | blob message
//
// Both layouts are the same for every type; decode_request() then checks the fields each type uses
// (see RequestType). Requests are bounded by StoreLimits (max_request_payload()), responses by the
// value limit the client accepts. The decoders are pure functions over bytes: malformed input yields an
// error string, never a crash, and every length is compared with the bytes actually present (and with the
// limits) before anything is allocated, so they can be fuzzed directly.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "symcomm/store.h"

namespace symcomm::detail {

/// Sent in the hello's number field: "SYMC" and protocol version 1.
inline constexpr int64_t kStoreProtocolMagic = 0x53594D4300000001;
inline constexpr size_t kFrameHeaderBytes = 4;
/// Most keys in one request (wait on many keys).
inline constexpr size_t kMaxKeysPerRequest = 65536;
/// Room for the keys of one wait request, beyond a single maximal key.
inline constexpr size_t kMaxKeySectionBytes = size_t{1} << 20;
/// Longest error message or token accepted.
inline constexpr size_t kMaxMessageBytes = 64 * 1024;

enum class RequestType : uint8_t {
  kHello = 1,       ///< value = token, number = kStoreProtocolMagic; must be first on a connection
  kSet = 2,         ///< keys[0], value
  kGet = 3,         ///< keys[0], number = timeout in ms; parked until the key exists
  kTryGet = 4,      ///< keys[0]
  kAdd = 5,         ///< keys[0], number = delta
  kCompareSet = 6,  ///< keys[0], value = expected, value2 = desired
  kWait = 7,        ///< keys (at least one), number = timeout in ms; parked until all exist
  kCheck = 8,       ///< keys[0]
  kRemove = 9,      ///< keys[0]
  kNumKeys = 10,    ///< no fields
};

enum class ResponseStatus : uint8_t {
  kOk = 0,        ///< value / number carry the result (number: add result, check/remove bool, num_keys)
  kNotFound = 1,  ///< try_get of a missing key
  kTimeout = 2,   ///< a parked get/wait passed its deadline; message lists the missing keys
  kError = 3,     ///< request refused (e.g. max_total_bytes); the connection stays usable
  kFatal = 4,     ///< protocol error or bad token; the server closes the connection after this
};

struct Request {
  RequestType type = RequestType::kNumKeys;
  int64_t number = 0;
  std::vector<std::string> keys;
  Bytes value;
  Bytes value2;
};

struct Response {
  ResponseStatus status = ResponseStatus::kOk;
  int64_t number = 0;
  Bytes value;
  std::string message;
};

/// Result of a decoder: a message, or the reason the bytes were rejected.
template <class T>
struct Decoded {
  std::optional<T> message;
  std::string error;
};

std::string_view to_string(RequestType type);

/// Largest request payload a server with these limits accepts (a compare_set of two maximal values, or a
/// wait on kMaxKeySectionBytes of keys).
size_t max_request_payload(const StoreLimits& limits);
/// Largest payload of a hello (a token of kMaxMessageBytes): what the server accepts before a connection has
/// said hello, whatever its limits.
size_t max_hello_payload();
/// Largest response payload carrying a value of max_value_bytes.
size_t max_response_payload(size_t max_value_bytes);

/// Encoders return a whole frame (header included).
Bytes encode_request(const Request& request);
Bytes encode_response(const Response& response);

/// Decoders take a frame's payload (header excluded).
Decoded<Request> decode_request(std::span<const uint8_t> payload, const StoreLimits& limits);
Decoded<Response> decode_response(std::span<const uint8_t> payload, size_t max_value_bytes);

/// Accumulates the bytes read from a stream and cuts them into frames.
class FrameReader {
 public:
  enum class Status { kNeedMore, kFrame, kOversized };

  explicit FrameReader(size_t max_payload) : max_payload_(max_payload) {}
  /// Changes the limit for the frames not yet returned (the server's, once a connection said hello).
  void set_max_payload(size_t max_payload) { max_payload_ = max_payload; }

  /// Writable space of n bytes at the end of the buffer; call commit() with the bytes actually written.
  /// Invalidates the payload returned by the previous next().
  std::span<uint8_t> prepare(size_t n);
  void commit(size_t n);

  /// kFrame: *payload is the next frame's payload (valid until prepare()). kOversized: the next frame's
  /// header announces more than max_payload bytes (*payload_bytes says how many); the stream cannot be
  /// resynchronised.
  Status next(std::span<const uint8_t>* payload, size_t* payload_bytes = nullptr);

  /// Bytes received and not yet returned as frames.
  size_t buffered() const { return buf_.size() - start_; }

 private:
  size_t max_payload_;
  Bytes buf_;
  size_t start_ = 0;     // first byte not yet returned by next()
  size_t prepared_ = 0;  // bytes added by the last prepare()
};

/// Equality of a presented secret with the expected one in time independent of where they differ.
bool constant_time_equal(std::string_view presented, std::string_view expected);

}  // namespace symcomm::detail
