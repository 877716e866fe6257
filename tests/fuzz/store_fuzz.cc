// libFuzzer target for the rendezvous store (built by tools/fuzz.sh with clang, ASan and UBSan).
// Client side: the decoders must reject malformed bytes with an error, never crash, and anything they
// accept must survive an encode/decode round trip unchanged; the frame reader must cut any byte stream
// safely. Server side: every input is also sent raw to a live server (half of them after a valid hello);
// after each, a well-behaved client must still be served: junk only ever costs its own connection.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "bootstrap/store_wire.h"
#include "symcomm/error.h"
#include "symcomm/store.h"

namespace {

using namespace symcomm;
using namespace symcomm::detail;

constexpr const char* kToken = "fuzz-token";

StoreServer& server() {
  static std::unique_ptr<StoreServer> s =
      StoreServer::start(StoreServerOptions{.host = "127.0.0.1", .port = 0, .token = kToken, .limits = {}});
  return *s;
}

void check_round_trip(std::span<const uint8_t> data) {
  StoreLimits limits;
  Decoded<Request> req = decode_request(data, limits);
  if (req.message) {
    Bytes frame = encode_request(*req.message);
    Decoded<Request> again = decode_request(std::span(frame).subspan(kFrameHeaderBytes), limits);
    if (!again.message || again.message->keys != req.message->keys || again.message->value != req.message->value ||
        again.message->value2 != req.message->value2 || again.message->number != req.message->number ||
        again.message->type != req.message->type) {
      std::abort();  // an accepted request must round-trip
    }
  } else if (req.error.empty()) {
    std::abort();  // a rejection must say why
  }
  Decoded<Response> resp = decode_response(data, limits.max_value_bytes);
  if (resp.message) {
    Bytes frame = encode_response(*resp.message);
    Decoded<Response> again = decode_response(std::span(frame).subspan(kFrameHeaderBytes), limits.max_value_bytes);
    if (!again.message || again.message->value != resp.message->value ||
        again.message->message != resp.message->message || again.message->status != resp.message->status) {
      std::abort();
    }
  }
  FrameReader reader(1 << 16);
  size_t pos = 0;
  while (pos < data.size()) {
    size_t chunk = std::min<size_t>(1 + data[pos] % 17, data.size() - pos);
    auto space = reader.prepare(chunk);
    std::memcpy(space.data(), data.data() + pos, chunk);
    reader.commit(chunk);
    pos += chunk;
    std::span<const uint8_t> payload;
    FrameReader::Status st;
    while ((st = reader.next(&payload)) == FrameReader::Status::kFrame) {
      (void)decode_request(payload, StoreLimits{});
    }
    if (st == FrameReader::Status::kOversized) break;
  }
}

void send_raw(std::span<const uint8_t> data) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server().port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  if (!data.empty() && data[0] % 2 == 0) {
    Request hello{.type = RequestType::kHello,
                  .number = kStoreProtocolMagic,
                  .keys = {},
                  .value = Bytes(kToken, kToken + std::strlen(kToken)),
                  .value2 = {}};
    Bytes frame = encode_request(hello);
    (void)::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
  }
  (void)::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 5) > 0) {
    uint8_t buf[4096];
    (void)::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  }
  ::close(fd);
}

void check_server_still_serves() {
  static std::unique_ptr<Store> client = Store::connect(
      StoreOptions{.host = "127.0.0.1", .port = server().port(), .token = kToken, .timeout = std::chrono::seconds(5)});
  static int64_t expected = 0;
  if (client->add("fuzz/alive", 1) != ++expected) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  check_round_trip(bytes);
  send_raw(bytes);
  check_server_still_serves();
  return 0;
}
