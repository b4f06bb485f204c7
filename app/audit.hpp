// `audit`: replays the dispatch log from offset 0 up to the stored checkpoints
// into an in-memory model (user -> conversation -> max created_at) and diffs it
// with the session sets in Redis.
//
// Exit codes: 0 consistent · 5 differences found (missing, stale or unknown
// members) · 3 cannot prove (stored state invalid, a partition's low > 0, or
// an undecodable record below a checkpoint) · 4 a dependency is unreachable or
// the broker stopped delivering.
//
// Memory: the model holds one entry per distinct (user, conversation) pair of
// the replayed history (about 50 bytes plus the user id once per user;
// conversation ids are interned, stored once each).  It does not grow with the
// number of records beyond that, but it does grow with users × conversations
// per user, so auditing a large history needs memory of that order.
#pragma once

#include <memory>

#include "app/node_config.hpp"
#include "app/progress.hpp"

namespace qsp::app {

/// Progress of the replay: a bar on `line` (non-null: stderr shows one), else
/// a plain line every projection.progress-interval on stderr.
int cmd_audit(const node_settings& s, const progress_options& progress,
              std::shared_ptr<status_line> line);

} // namespace qsp::app
