// The metadata verifier (docs/DESIGN.md §4.1–4.3): the startup inspection, the
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
  /// The whole startup sequence of a generation: every partition it owns.
  caf::expected<verified_start> run(const projection_settings& cfg, generation& gen);
  /// docs/DESIGN.md §12, "Decision — handover": the same verification for
  /// partitions `added` to the running generation `gen`, whose consumer
  /// then adds them (incremental assign); the answer holds only them.
  caf::expected<verified_start> extend(const projection_settings& cfg, generation& gen,
                                       const std::vector<int32_t>& added);
};

verifier_actor::behavior_type
metadata_verifier(verifier_actor::stateful_pointer<verifier_state> self, projection_settings cfg,
                  std::shared_ptr<generation> gen);

} // namespace qsp
