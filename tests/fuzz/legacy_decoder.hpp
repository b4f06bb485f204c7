// The pre-issue-16 decoder (see legacy_decoder.cpp): the differential oracle.
#pragma once

#include <string>
#include <string_view>

#include "core/dispatch.hpp"

namespace qsp::legacy {

bool decode(std::string_view value, core::dispatch& out, std::string& error);

}  // namespace qsp::legacy
