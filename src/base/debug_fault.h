#pragma once
// Testing only: fault injection at a few places that a test cannot otherwise make fail on one rank alone.
//
// SYMCOMM_DEBUG_FAULT=<site>@<rank>[,<site>@<rank>...] makes debug_fault(site, rank) true for those pairs, and
// the code at that site then fails as the real failure it stands for would (an error of the same kind). Sites:
//   ce_setup     the copy engine's local resources at creation (its staging buffer: out of device memory);
//   heap_import  a symmetric alloc's import of a peer's part (the driver refuses the handle).
// Read at each call (the sites run at creation and alloc(), never per collective). Unset in production.
#include <string_view>

namespace symcomm::detail {

/// Whether SYMCOMM_DEBUG_FAULT arms `site` on `rank` (defined in config.cc, which reads the environment).
bool debug_fault(std::string_view site, int rank);

}  // namespace symcomm::detail
