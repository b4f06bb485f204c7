// Membership in the Kafka consumer group (projection.ownership = group,
// docs/DESIGN.md §12): the group's coordinator decides which partitions this node
// owns; the node projects them with its own consumer, explicit starts from
// its Redis checkpoints.  This handle only takes part in the group: every
// partition it is given is paused at once (it never hands out a record) and
// it never commits an offset.
#pragma once

#include <memory>
#include <string>

#include "kafka/client.hpp"
#include "ports/ports.hpp"

namespace qsp::kafka {

struct group_member_config {
  client_settings client;
  std::string group_id;
  std::string topic;
  int session_timeout_ms = 6000;
};

/// Joins at once and runs on a thread of its own until leave(); the
/// events are called on that thread (`revoked` may block: the group waits).
caf::expected<std::unique_ptr<group_membership>> make_group_member(group_member_config cfg,
                                                                   group_events events);

} // namespace qsp::kafka
