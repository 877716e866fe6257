#pragma once
/// \file symcomm.h
/// Umbrella header: everything a user of symcomm needs.
#include "symcomm/bucketer.h"
#include "symcomm/communicator.h"
#include "symcomm/config.h"
#include "symcomm/error.h"
#include "symcomm/fused.h"
#include "symcomm/memory.h"
#include "symcomm/store.h"
#include "symcomm/types.h"
