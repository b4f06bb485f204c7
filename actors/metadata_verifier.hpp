// The metadata verifier (DESIGN.md §4.1–4.3): the startup inspection, the
// explicit starts, meta creation and the identity re-check.
#pragma once

#include "actors/generation.hpp"
#include "qsession/projection/settings.hpp"
#include "messages/actors.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace qsp {

// -- metadata verifier --------------------------------------------------------

struct verifier_state {
  static inline const char* name = "metadata-verifier";
  caf::expected<verified_start> run(const projection_settings& cfg, generation& gen);
};

verifier_actor::behavior_type
metadata_verifier(verifier_actor::stateful_pointer<verifier_state> self, projection_settings cfg,
                  std::shared_ptr<generation> gen);

} // namespace qsp
