#pragma once

#include "caf/actor_system_config.hpp"

namespace qsp {

/// Registers every message type of the projection with a CAF config.  Embedding
/// hosts call this on their own actor_system_config before creating the system.
void register_types(caf::actor_system_config& cfg);

} // namespace qsp
