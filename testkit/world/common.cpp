#include "testkit/world/common.hpp"

namespace qsp::test {

bool fault::fire() {
  if (count == 0)
    return false;
  if (skip > 0) {
    --skip;
    return false;
  }
  if (count > 0)
    --count;
  return true;
}

std::vector<applied_update> copy_updates(const std::vector<session_update>& ups) {
  std::vector<applied_update> out;
  for (auto& u : ups) {
    applied_update a{std::string{u.user}, {}};
    for (size_t j = 0; j < u.count; ++j)
      a.members.emplace_back(std::string{u.members[j].conversation}, u.members[j].created_at);
    out.push_back(std::move(a));
  }
  return out;
}

namespace sim {

caf::error failure(const fault& f, ec fallback, const std::string& what) {
  auto code = f.code == ec::unspecified ? fallback : f.code;
  return caf::make_error(code, "fake: injected failure: " + what);
}

caf::error frozen(const std::string& what) {
  return caf::make_error(ec::redis_unavailable, "fake redis: " + what + ": timed out");
}

} // namespace sim

} // namespace qsp::test
