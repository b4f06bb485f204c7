// The node's command line (qsession-projection run|catch-up|verify|...) as a
// function, so that another binary can be the same node with a hook: the
// example reader's node (examples/reader) runs `run` and `catch-up` through
// a host's own dispatch-log reader.
#pragma once

#include <functional>

#include "qsession/projection/reader.hpp"
#include "qsession/projection/settings.hpp"

namespace qsp::app {

struct node_hooks {
  /// The reader factory for `run` and `catch-up` (spawn_options::reader),
  /// made from the node's settings; empty: the product's own reader.
  std::function<dispatch_log_factory(const projection_settings&)> reader;
};

/// main() of qsession-projection.
int node_main(int argc, char** argv, const node_hooks& hooks);

} // namespace qsp::app
