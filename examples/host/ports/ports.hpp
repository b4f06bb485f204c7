// The host's own ports/ports.hpp: the projection's include paths must never
// shadow it (a library that exported its source root did).
#pragma once

namespace host {

/// The port the host's own (fictional) cache listens on.
constexpr int cache_port = 7000;

} // namespace host
