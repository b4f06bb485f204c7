// The host's own messages: one type-ID block at caf::first_custom_type_id,
// with its own `status` atom (the projection's is `qsp_status`, a different
// atom).  main.cpp and the host's tests (host_kit_test.cpp) register it,
// before their actor system exists, with
// `qsp::add_type_blocks<caf::id_block::host>(cfg)` (CAF 0.17: adds it to the
// configuration; 1.x: caf::init_global_meta_objects<caf::id_block::host>()).
#pragma once

#include <cstdint>
#include <string>

#include "caf/type_id.hpp"

#include "qsession/projection/caf_compat.hpp"

namespace host {

struct cache_entry {
  std::string key;
  int64_t value = 0;
};

template <class Inspector>
auto inspect(Inspector& f, cache_entry& x) {
  return qsp::inspect_object(f, x, "host.cache_entry",
                        QSP_FIELD(x, key),
                        QSP_FIELD(x, value));
}

} // namespace host

CAF_BEGIN_TYPE_ID_BLOCK(host, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(host, (host::cache_entry))
  CAF_ADD_ATOM(host, host::atom, status, "status")
  CAF_ADD_ATOM(host, host::atom, ping, "ping")
  // The sessions gate (gate.hpp): a client's PULL_SESSION_LIST, and the
  // gate's view of its tenant.
  CAF_ADD_ATOM(host, host::atom, pull, "pull")
  CAF_ADD_ATOM(host, host::atom, health, "health")
CAF_END_TYPE_ID_BLOCK(host)
