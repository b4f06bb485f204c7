// qsession durable session projection: the umbrella header for hosts
// (docs/EMBEDDING.md).  None of these headers includes librdkafka or hiredis.
#pragma once

#include "qsession/projection/config.hpp"
#include "qsession/projection/metrics.hpp"
#include "qsession/projection/options.hpp"
#include "qsession/projection/projection.hpp"
#include "qsession/projection/settings.hpp"
#include "qsession/projection/types.hpp"
