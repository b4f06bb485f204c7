#include "core/start_plan.hpp"

namespace qsp::core {

namespace {

std::string describe(const watermarks& m) {
  return "low=" + to_decimal(m.low) + ",high=" + to_decimal(m.high);
}

partition_plan plan_partition(int32_t partition, const watermarks& m,
                              std::optional<int64_t> checkpoint,
                              std::vector<problem>& problems) {
  partition_plan plan{partition, m.low, m.high, checkpoint, std::nullopt, verdict::refuse, {}};
  const std::string stored = checkpoint ? to_decimal(*checkpoint) : std::string(absent);
  auto refuse = [&](std::string_view field, std::string observed, std::string reason) {
    plan.reason = reason;
    problems.push_back(problem{partition, std::string(field), stored, std::move(observed),
                               std::move(reason)});
  };

  if (m.low < 0 || m.high < m.low) {
    refuse("watermarks", describe(m), "broker reported malformed watermarks");
  } else if (checkpoint) {
    if (*checkpoint < m.low) {
      refuse(fields::next_offset, describe(m),
             "checkpoint is below the low watermark: records it needs were deleted");
    } else if (*checkpoint > m.high) {
      refuse(fields::next_offset, describe(m), "checkpoint is above the high watermark");
    } else {
      plan.start = *checkpoint;
      plan.v = *checkpoint == m.high ? verdict::caught_up : verdict::resume;
      plan.reason = plan.v == verdict::caught_up ? "checkpoint equals the high watermark"
                                                 : "resume from the checkpoint";
    }
  } else if (m.low == 0) {
    plan.start = 0;
    plan.v = verdict::bootstrap;
    plan.reason = "no checkpoint and the full history is retained";
  } else {
    refuse(fields::next_offset, "low=" + to_decimal(m.low),
           "no checkpoint and the log no longer starts at 0: nothing proves history was projected");
  }
  return plan;
}

}  // namespace

const char* to_string(verdict v) {
  switch (v) {
    case verdict::resume: return "resume";
    case verdict::bootstrap: return "bootstrap";
    case verdict::caught_up: return "caught_up";
    case verdict::refuse: return "refuse";
  }
  return "unknown";
}

std::map<int32_t, int64_t> start_plan::starts() const {
  std::map<int32_t, int64_t> result;
  for (const partition_plan& p : partitions) {
    if (p.start) result.emplace(p.partition, *p.start);
  }
  return result;
}

std::map<int32_t, int64_t> start_plan::h0() const {
  std::map<int32_t, int64_t> result;
  for (const partition_plan& p : partitions) result.emplace(p.partition, p.high);
  return result;
}

start_plan plan_start(const std::map<int32_t, int64_t>& checkpoints,
                      const std::vector<watermarks>& marks) {
  start_plan plan;
  plan.partitions.reserve(marks.size());
  for (size_t i = 0; i < marks.size(); ++i) {
    const auto partition = static_cast<int32_t>(i);
    auto it = checkpoints.find(partition);
    std::optional<int64_t> checkpoint;
    if (it != checkpoints.end()) checkpoint = it->second;
    plan.partitions.push_back(plan_partition(partition, marks[i], checkpoint, plan.problems));
  }
  for (const auto& [partition, next_offset] : checkpoints) {
    if (partition < 0 || static_cast<size_t>(partition) >= marks.size()) {
      plan.problems.push_back(problem{partition, std::string(fields::next_offset),
                                      to_decimal(next_offset),
                                      "partitions=" + to_decimal(static_cast<int64_t>(marks.size())),
                                      "checkpoint for a partition the topic does not have"});
    }
  }
  return plan;
}

}  // namespace qsp::core
