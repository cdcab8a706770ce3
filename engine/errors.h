// The project's error types now live in common/errors.h, below every layer. This forwarding header
// stays only for the files still being changed on other branches (engine/cuda/*,
// engine/batch_generation.cc, tests/cuda/*); include common/errors.h in new code.
#pragma once

#include "common/errors.h"
