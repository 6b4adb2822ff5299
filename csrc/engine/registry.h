// Process-wide table of live communicators, so that code outside the Python
// module (the TensorFlow op library, which is a separate shared object)
// can reach the communicator Python created, by a small integer handle.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/communicator.h"

namespace pytfcomm {

// Returns the handle of `comm`, registering it on first call (handles start at 1).
int64_t register_communicator(const std::shared_ptr<Communicator>& comm);
// The communicator with that handle, or null if it was never registered or
// has been destroyed (the table holds weak pointers).
std::shared_ptr<Communicator> find_communicator(int64_t handle);
// Every registered communicator still alive.
std::vector<std::shared_ptr<Communicator>> live_communicators();

}  // namespace pytfcomm
