// The stand-in's environment knobs (one job: reading them); the list and
// their meaning are documented at the top of nccl.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptcsi_nccl {

struct Knobs {
  int never_join = -1;        // PTCSI_NCCL_NEVER_JOIN: this rank never completes init
  uint64_t error_at = 0;      // PTCSI_NCCL_ASYNC_ERROR_AT: n (1-based), 0 = off
  int error_rank = -1;        //   ... on this rank only (-1 = every rank)
  uint64_t hang_at = 0;       // PTCSI_NCCL_HANG_AT
  int hang_rank = -1;         //   ... on this rank only (-1 = every rank)
  bool in_progress = false;   // PTCSI_NCCL_INPROGRESS=1
  size_t slot_bytes = 0;      // PTCSI_NCCL_SLOT_BYTES (0 = the default)
  uint64_t stop_at = 0;       // PTCSI_NCCL_STOP_AT: stopped before the n-th launch
  int stop_rank = -1;         //   ... on this rank only (-1 = every rank)
  bool launch_waits = false;  // PTCSI_NCCL_LAUNCH_WAITS=1 (blocking comms)
  int shrink_fail = -1;       // PTCSI_NCCL_SHRINK_FAIL: this parent rank's shrink fails
  bool error_here(int rank, uint64_t n) const {
    return error_at != 0 && n == error_at && (error_rank < 0 || error_rank == rank);
  }
  bool stop_here(int rank, uint64_t n) const {
    return stop_at != 0 && n == stop_at && (stop_rank < 0 || stop_rank == rank);
  }
  bool hang_here(int rank, uint64_t n) const {
    return hang_at != 0 && n == hang_at && (hang_rank < 0 || hang_rank == rank);
  }
};

// Reads the environment now (at every init: tests change it between
// communicators). A malformed value is reported on stderr and ignored.
Knobs read_knobs();

}  // namespace ptcsi_nccl
