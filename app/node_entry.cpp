// qsession-projection: the node with the product's own reader.
#include "app/node_main.hpp"

int main(int argc, char** argv) {
  return qsp::app::node_main(argc, argv, {});
}
