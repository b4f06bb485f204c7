// What the supervisor's two files share (actors/supervisor.cpp: the
// lifecycle; actors/supervisor_ownership.cpp: ownership changes and the
// cluster heartbeat).  Not a public interface: both run on the supervisor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/supervisor.hpp"

namespace qsp::supervision {

using supervisor_pointer = supervisor_actor::stateful_pointer<supervisor_state>;

// -- lifecycle (supervisor.cpp) ----------------------------------------------------

/// The PULL_SESSION_LIST gate: state ready and, clustered, the namespace ready.
bool gate_open(const supervisor_state& st);
/// Tells every subscriber the current status.
void notify(supervisor_pointer self);
/// Moves to `next` (logged with `why`), recomputes the gate, tells everyone.
void transition(supervisor_pointer self, std::string next, const std::string& why);
/// Ends the generation's children and blocking calls; with `watch` they stay
/// monitored and are remembered in `dying`.
void stop_children(supervisor_pointer self,
                   caf::error reason = caf::exit_reason::user_shutdown, bool watch = false);
/// Dirty (backoff, restart) or refused, from a generation's failure.
void fail(supervisor_pointer self, caf::error err);
/// One consumer per partition of `vs`; false (and failed) without a reader.
bool spawn_consumers(supervisor_pointer self, const verified_start& vs, generation& gen);
void start_generation(supervisor_pointer self);

// -- ownership (supervisor_ownership.cpp) ----------------------------------------

/// Partition `p` moved to another node: an error to fail with (a refusal in
/// the fixed modes), none when the node lets it go.
caf::error on_fenced(supervisor_pointer self, int32_t p, const std::string& why);
/// A regeneration's children are all down: answer its revokes, start anew.
void finish_regeneration(supervisor_pointer self);
/// Stops the running generation and starts one with the current ownership.
void regenerate(supervisor_pointer self);
/// The generation runs and an ownership change can touch only what moves.
bool running(const supervisor_state& st);
/// Adds `added` to the running generation (verified first).
void extend(supervisor_pointer self, std::vector<int32_t> added);
/// Takes `dropped` out of the running generation; answers `rp` once the
/// writer has nothing of them in flight.
void shrink(supervisor_pointer self, const std::vector<int32_t>& dropped,
            caf::typed_response_promise<caf::ok_atom> rp);
/// What holds the namespace closed ("2: no owner; 3: owner n1 is verifying").
std::string namespace_held(const supervisor_state& st);
/// One cluster heartbeat: publish, read the view, judge the report.
void heartbeat(supervisor_pointer self);

} // namespace qsp::supervision
