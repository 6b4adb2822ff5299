// What the parts of the engine know of their job once it is connected
// (engine/communicator.h): set before any of them exists and fixed for the
// communicator's life, so they hold it by reference and read it without a
// lock from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/collective.h"

namespace pytfcomm {

// Incremented in every child of fork() (engine_config.cc): a communicator
// made before the fork belongs to the parent (its connections, its shared
// memory, its threads).
extern std::atomic<uint64_t> g_fork_generation;

struct EngineConfig {
  int rank = 0;
  int size = 1;
  int root_port = 0;  // the port rank 0 listens on
  int num_hosts = 1;
  bool uniform_hosts = false;    // every host runs the same number of ranks
  double timeout_s = 0;          // the deadline of a call that names none
  uint64_t fork_generation = 0;  // g_fork_generation when it was made
  std::vector<std::string> hosts;
  algorithms::Group world, local, cross;
  size_t eager_bytes = 0;            // largest input that may run within a round
  double drive_s = 0;                // how long a submitting thread may drive (submit_async)
  size_t segment_bytes = 0;          // the ring's pipeline segment (agreed)
  size_t oversub_segment_bytes = 0;  // the ring's, ranks outnumbering cores (0: not so)
  size_t halving_bytes = 0;          // auto's halving-doubling limit (agreed; 0: never)
  // Bytes per rank from which auto's halving-doubling also runs over shared
  // memory alone (agreed; 0: never): ranks outnumber cores on some host.
  size_t shm_halving_from = 0;
  bool all_shared_memory = false;  // every pair of ranks shares memory (agreed)
  size_t ahead_bytes = 0;          // the largest first step sent ahead (agreed; 0: none)
  double beat_s = 0;               // liveness heartbeat interval (0: off)

  // In a child forked after it was made: nothing of it is this process's.
  bool forked(std::memory_order order = std::memory_order_seq_cst) const {
    return g_fork_generation.load(order) != fork_generation;
  }
};

}  // namespace pytfcomm
