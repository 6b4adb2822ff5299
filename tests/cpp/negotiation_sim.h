// A negotiation among `size` ranks with no transport and no threads, for
// what the rounds cost (docs/negotiation.md, "Agreed collectives in the
// steady state"): every rank writes its record as the driver does
// (add_announcement), every rank reads every record and decides with its own
// Negotiator, and what each rank sends and receives is counted, as frames
// (Bruck's all-gather of records in bundles, transport/host/rounds.cc, with
// the transport's own write_bundle/parse_bundle; every rank checks that the
// bundles gave it every other rank's record byte for byte) and as its record
// alone (what a shared-memory peer reads of it).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/negotiator.h"
#include "transport/host/bundle.h"

namespace pytfcomm::testing_util {

class NegotiationSim {
 public:
  // `by_slot`: records confirm agreed collectives by cache slot
  // (PYTFCOMM_NEGOTIATION_CACHE=1).
  NegotiationSim(int size, bool by_slot);

  // Rank `rank` asks for a collective on `stream`, numbered in that stream
  // by the rank and labelled "<name> #<seq>" as the engine labels TF ops.
  Request* call(int rank, uint64_t stream, const Descriptor& d, const std::string& name);
  // Rank `rank` skips its next number on `stream` (a call the others make).
  void skip(int rank, uint64_t stream) { ++next_seq(ranks_[static_cast<size_t>(rank)], stream); }
  // One round: every rank publishes what it has not announced yet, then
  // reads every record and decides. Throws what absorb() throws.
  void round();
  // What the last round decided on rank `rank`.
  const std::vector<Decision>& decided(int rank) const {
    return decided_[static_cast<size_t>(rank)];
  }
  Negotiator& negotiator(int rank) { return *ranks_[static_cast<size_t>(rank)].negotiator; }
  int size() const { return size_; }

  // What rank `rank` sent and received since the last reset_cost().
  struct Cost {
    uint64_t records = 0;         // rounds it published
    uint64_t record_bytes = 0;    // its own records
    uint64_t frames = 0;          // frames it sent (ceil(log2 size) per round)
    uint64_t frame_bytes = 0;     // their bytes (bundles of records)
    uint64_t frames_in = 0;       // frames it received
    uint64_t frame_bytes_in = 0;  // their bytes
  };
  const Cost& cost(int rank) const { return ranks_[static_cast<size_t>(rank)].cost; }
  void reset_cost();

 private:
  struct Rank {
    std::unique_ptr<Negotiator> negotiator;
    std::vector<Request*> fresh;
    std::vector<uint64_t> next_seq;  // by stream index in streams_
    std::vector<char> buf;
    size_t bytes = 0;
    Cost cost;
    std::vector<std::vector<char>> in;  // the bundle received in each step
    std::vector<host::BundleView> views;
  };
  uint64_t& next_seq(Rank& r, uint64_t stream);
  // Bruck's all-gather of this round's records in bundles; throws unless
  // every rank ends with every record as its sender wrote it.
  void exchange();

  int size_;
  bool by_slot_;
  uint64_t round_ = 1;
  std::vector<Rank> ranks_;
  std::vector<uint64_t> streams_;
  std::deque<std::unique_ptr<Request>> requests_;
  std::vector<std::vector<Decision>> decided_;
  std::vector<ParsedRecord> parsed_;
};

}  // namespace pytfcomm::testing_util
