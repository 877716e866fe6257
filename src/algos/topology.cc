#include "algos/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/hash.h"

namespace symcomm::detail {
namespace {

constexpr int kMaxWorld = 64;

std::string_view kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlink: return "nvlink";
    case LinkKind::kPcie: return "pcie";
    case LinkKind::kNone: break;
  }
  return "none";
}

LinkKind kind_of(const std::string& s) {
  if (s == "nvlink") return LinkKind::kNvlink;
  if (s == "pcie") return LinkKind::kPcie;
  SYMCOMM_CHECK_ARG(s == "none", "topology: unknown link kind '{}' (nvlink, pcie or none)", s);
  return LinkKind::kNone;
}

}  // namespace

Topology::Topology(int world_size) : n_(world_size) {
  SYMCOMM_CHECK_ARG(world_size >= 1 && world_size <= kMaxWorld, "topology: world size {} outside 1-{}", world_size,
                    kMaxWorld);
  links_.resize(static_cast<size_t>(n_) * n_);
}

void Topology::set(int a, int b, Link link) {
  SYMCOMM_CHECK_ARG(a >= 0 && a < n_ && b >= 0 && b < n_, "topology: pair {}-{} outside ranks 0-{}", a, b, n_ - 1);
  SYMCOMM_CHECK_ARG(a != b, "topology: rank {} linked to itself", a);
  if (link.kind == LinkKind::kNone) link.count = 0;
  if (link.kind == LinkKind::kPcie) link.count = 1;
  SYMCOMM_CHECK_ARG(link.kind == LinkKind::kNone || link.count >= 1, "topology: pair {}-{}: NVLink count {} below 1", a,
                    b, link.count);
  links_[static_cast<size_t>(a) * n_ + b] = link;
  links_[static_cast<size_t>(b) * n_ + a] = link;
}

bool Topology::full_mesh() const {
  for (int a = 0; a < n_; ++a) {
    for (int b = a + 1; b < n_; ++b) {
      if (!linked(a, b)) return false;
    }
  }
  return true;
}

bool Topology::full_mesh(LinkKind kind) const {
  for (int a = 0; a < n_; ++a) {
    for (int b = a + 1; b < n_; ++b) {
      if (at(a, b).kind != kind) return false;
    }
  }
  return true;
}

uint64_t Topology::fingerprint() const {
  Fnv1a h;
  h.add(static_cast<uint64_t>(n_));
  for (const Link& l : links_) h.add(static_cast<uint64_t>(l.kind)).add(static_cast<uint64_t>(l.count));
  return h.value();
}

std::string Topology::to_json() const {
  nlohmann::json links = nlohmann::json::array();
  for (int a = 0; a < n_; ++a) {
    for (int b = a + 1; b < n_; ++b) {
      const Link& l = at(a, b);
      if (l.kind == LinkKind::kNone) continue;
      nlohmann::json j{{"ranks", {a, b}}, {"kind", kind_name(l.kind)}};
      if (l.kind == LinkKind::kNvlink) j["count"] = l.count;
      links.push_back(std::move(j));
    }
  }
  return nlohmann::json{{"world_size", n_}, {"links", std::move(links)}}.dump();
}

Topology Topology::among(const std::vector<int>& ranks) const {
  Topology t(static_cast<int>(ranks.size()));
  std::vector<bool> seen(static_cast<size_t>(n_));
  for (int r : ranks) {
    SYMCOMM_CHECK_ARG(r >= 0 && r < n_ && !seen[r], "topology: rank {} outside 0-{} or listed twice", r, n_ - 1);
    seen[r] = true;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (size_t j = i + 1; j < ranks.size(); ++j) {
      if (linked(ranks[i], ranks[j])) t.set(static_cast<int>(i), static_cast<int>(j), at(ranks[i], ranks[j]));
    }
  }
  return t;
}

Topology Topology::full(int world_size, LinkKind kind) {
  Topology t(world_size);
  for (int a = 0; a < world_size; ++a) {
    for (int b = a + 1; b < world_size; ++b) t.set(a, b, {kind, 1});
  }
  return t;
}

Topology Topology::hybrid_cube_mesh() {
  Topology t(8);
  for (int q = 0; q < 8; q += 4) {
    for (int a = q; a < q + 4; ++a) {
      for (int b = a + 1; b < q + 4; ++b) t.set(a, b, {LinkKind::kNvlink, 1});
    }
  }
  for (int a = 0; a < 4; ++a) t.set(a, a + 4, {LinkKind::kNvlink, 1});
  return t;
}

Topology Topology::ring(int world_size, LinkKind kind) {
  Topology t(world_size);
  for (int a = 0; world_size > 1 && a < world_size; ++a) {
    const int b = (a + 1) % world_size;
    if (!t.linked(a, b)) t.set(a, b, {kind, 1});
  }
  return t;
}

Topology agree_topology(const std::vector<std::vector<LinkSighting>>& sightings, bool reachable) {
  const int n = static_cast<int>(sightings.size());
  Topology t(n);
  for (int a = 0; a < n; ++a) {
    SYMCOMM_CHECK(static_cast<int>(sightings[a].size()) == n, kInternal, "topology: rank {} sent {} sightings for {}",
                  a, sightings[a].size(), n);
  }
  using P2p = LinkSighting::P2p;
  if (!reachable) return t;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const LinkSighting& x = sightings[a][b];
      const LinkSighting& y = sightings[b][a];
      const bool refused = x.p2p == P2p::kNo || y.p2p == P2p::kNo;
      if (refused) continue;
      if (x.nvlinks > 0 && y.nvlinks > 0) {
        t.set(a, b, {LinkKind::kNvlink, std::min(x.nvlinks, y.nvlinks)});
      } else {
        t.set(a, b, {LinkKind::kPcie, 1});
      }
    }
  }
  return t;
}

Topology parse_topology(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SYMCOMM_THROW(kInvalidArgument, "topology: not JSON: {}", e.what());
  }
  SYMCOMM_CHECK_ARG(j.is_object(), "topology: expected an object with world_size and links");
  SYMCOMM_CHECK_ARG(j.contains("world_size") && j["world_size"].is_number_integer(),
                    "topology: world_size missing or not an integer");
  Topology t(j["world_size"].get<int>());
  SYMCOMM_CHECK_ARG(j.contains("links") && j["links"].is_array(), "topology: links missing or not an array");
  std::vector<bool> seen(static_cast<size_t>(t.world_size()) * t.world_size());
  for (const nlohmann::json& l : j["links"]) {
    SYMCOMM_CHECK_ARG(l.is_object() && l.contains("ranks") && l["ranks"].is_array() && l["ranks"].size() == 2 &&
                          l["ranks"][0].is_number_integer() && l["ranks"][1].is_number_integer(),
                      "topology: a link needs \"ranks\": [a, b] (got {})", l.dump());
    SYMCOMM_CHECK_ARG(l.contains("kind") && l["kind"].is_string(), "topology: link {} has no kind", l.dump());
    const int a = l["ranks"][0].get<int>(), b = l["ranks"][1].get<int>();
    const LinkKind kind = kind_of(l["kind"].get<std::string>());
    int count = 1;
    if (l.contains("count")) {
      SYMCOMM_CHECK_ARG(l["count"].is_number_integer(), "topology: link {}: count is not an integer", l.dump());
      count = l["count"].get<int>();
    }
    SYMCOMM_CHECK_ARG(a >= 0 && a < t.world_size() && b >= 0 && b < t.world_size() && a != b,
                      "topology: link {}: ranks must be two different ranks of 0-{}", l.dump(), t.world_size() - 1);
    const size_t key = static_cast<size_t>(std::min(a, b)) * t.world_size() + std::max(a, b);
    SYMCOMM_CHECK_ARG(!seen[key], "topology: pair {}-{} listed twice", std::min(a, b), std::max(a, b));
    seen[key] = true;
    t.set(a, b, {kind, count});
  }
  return t;
}

}  // namespace symcomm::detail
