// qsp-example-reader-node: the node (qsession-projection's command line),
// reading the dispatch log through the example reader (example_reader.hpp)
// instead of the product's own: what a host does with spawn_options::reader.
// The test command runs the node's pipeline and fail-closed tests with it.
#include "app/node_main.hpp"
#include "example_reader.hpp"

int main(int argc, char** argv) {
  qsp::app::node_hooks hooks;
  hooks.reader = [](const qsp::projection_settings& s) -> qsp::dispatch_log_factory {
    example::reader_config cfg;
    cfg.bootstrap_servers = s.kafka.bootstrap_servers;
    cfg.topic = s.topic;
    cfg.group_id = s.kafka.group_id + "-example-reader";
    cfg.client_id = s.kafka.client_id + "-example-reader";
    cfg.properties = s.kafka.properties;
    cfg.timeout = s.kafka.timeout;
    return [cfg] { return example::make_reader(cfg); };
  };
  return qsp::app::node_main(argc, argv, hooks);
}
