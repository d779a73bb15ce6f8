// The planner's model of storage reads: a demand read's latency, the rate dense
// streaming's reads reach, and how a layer's streamed tensors become device reads and a
// pool slot (docs/PLANNER.md, "Dense streaming's read rate").
#include <algorithm>
#include <cmath>
#include <tuple>

#include "scheduler/planner_internal.h"

namespace hypura::scheduler::detail {
namespace {

// A grid point counts only when the tensors' reads, cut at its block, average at least
// this share of the block: smaller reads are not what the point measured.
constexpr double kMinSegmentShare = 0.7;

// Segments a request of `bytes` becomes when cut into `block`-byte device reads.
uint64_t segments(uint64_t bytes, uint64_t block) {
  return (bytes + block - 1) / block;
}

// A point's rate is the best of the points with no larger block and depth: more bytes in
// flight do not slow a disk down, and the envelope keeps one noisy point from choosing a
// shallow pattern over a deeper one that measured a hair less.
double envelope_bps(const profiler::StorageProfile& st, const profiler::SeqReadPoint& p) {
  double best = 0;
  for (const auto& q : st.sequential) {
    if (q.block_bytes <= p.block_bytes && q.queue_depth <= p.queue_depth)
      best = std::max(best, q.bps);
  }
  return best;
}

double bytes_in_flight(const profiler::SeqReadPoint& p) {
  return static_cast<double>(p.block_bytes) * p.queue_depth;
}

// The fastest grid point the pool reaches (see stream_io), its enveloped rate and the
// queue depth that makes the tensors' segments hold its bytes; point null when none is
// reachable.
struct GridChoice {
  const profiler::SeqReadPoint* point = nullptr;
  double bps = 0;
  uint32_t depth = 0;
};

GridChoice best_reachable_point(const profiler::StorageProfile& st,
                                const std::vector<uint64_t>& tensor_bytes, uint64_t total,
                                double in_flight, uint32_t max_queue_depth) {
  GridChoice best;
  for (const auto& pt : st.sequential) {
    const double want = bytes_in_flight(pt);
    if (want > in_flight) continue;
    uint64_t n_seg = 0;
    for (uint64_t b : tensor_bytes) n_seg += segments(b, pt.block_bytes);
    const double mean_seg = static_cast<double>(total) / static_cast<double>(n_seg);
    if (mean_seg < kMinSegmentShare * static_cast<double>(pt.block_bytes))
      continue;  // not this point's reads
    const double depth = std::max<double>(pt.queue_depth, std::ceil(want / mean_seg));
    if (depth > max_queue_depth) continue;
    const double bps = envelope_bps(st, pt);
    const bool more_in_flight = best.point && want > bytes_in_flight(*best.point);
    if (!best.point || bps > best.bps || (bps == best.bps && more_in_flight))
      best = {&pt, bps, static_cast<uint32_t>(depth)};
  }
  return best;
}

}  // namespace

// Seconds to read one `bytes` range at queue depth 1 beyond the streaming rate: the
// latency a demand read cannot hide (from the 1 MiB random figure; 100 us if unmeasured).
double read_latency_s(const profiler::StorageProfile& s) {
  double r1m = s.random_bps(1 << 20, 1);
  if (r1m <= 0 || s.seq_read_bps <= 0) return 100e-6;
  return std::max(0.0, (1 << 20) / r1m - (1 << 20) / s.seq_read_bps);
}

// How fast dense streaming reads, and with what request size and queue depth, given the
// streamed tensors' sizes and the bytes the pool keeps queued (`in_flight`: with `depth`
// layers read ahead, the next layer's reads complete while depth - 1 more are queued and
// the one after is submitted: about (depth - 1/2) x a layer on average).
//
// Each grid point (block b, depth q) of the profile is the disk at q reads of b in flight.
// A point is reachable when the pool queues at least its b x q bytes and the tensors cut
// into b-byte requests are device reads of about b (mean segment >= kMinSegmentShare of
// b); the queue depth is raised to b x q / mean segment so that the segments hold those
// bytes. Of the reachable points the fastest gives the rate, scaled so that the grid's
// best is the profile's headline figure (the bound). Below every point's bytes (tiny
// layers) the rate scales with the bytes in flight (the latency of the smallest point's
// reads bounds it). A profile without a grid streams at the headline figure with its best
// point's request size and depth.
StreamIo stream_io(const profiler::StorageProfile& st, const std::vector<uint64_t>& tensor_bytes,
                   double in_flight, uint32_t max_queue_depth) {
  StreamIo io;
  io.request_bytes = st.best_block_bytes ? st.best_block_bytes : uint64_t{1} << 20;
  io.queue_depth = st.best_queue_depth ? st.best_queue_depth : 32;
  io.bps = st.seq_read_bps;
  double grid_best = 0;
  for (const auto& pt : st.sequential) grid_best = std::max(grid_best, pt.bps);
  if (grid_best <= 0 || tensor_bytes.empty() || st.sequential.size() < 2) return io;
  const double scale = st.seq_read_bps / grid_best;
  uint64_t total = 0;
  for (uint64_t b : tensor_bytes) total += b;
  const GridChoice best = best_reachable_point(st, tensor_bytes, total, in_flight, max_queue_depth);
  if (best.point) {
    io.request_bytes = best.point->block_bytes;
    io.queue_depth = best.depth;
    io.bps = best.bps * scale;
    return io;
  }
  const profiler::SeqReadPoint* smallest = nullptr;
  for (const auto& pt : st.sequential) {
    if (!smallest || bytes_in_flight(pt) < bytes_in_flight(*smallest)) smallest = &pt;
  }
  io.request_bytes = smallest->block_bytes;
  io.queue_depth =
      std::min<uint32_t>(max_queue_depth, std::max<uint32_t>(smallest->queue_depth, 1));
  io.bps = smallest->bps * scale * std::max(0.0, in_flight) / bytes_in_flight(*smallest);
  return io;
}

// A layer's streamed tensors as the streaming pool reads and lays them out: file
// neighbours (gaps of at most one 4 KiB block) are one read, as StreamingProvider merges
// them (tiers::merge_runs); tensors of synthetic shapes (no file) are one read each.
// Each read sits in the slot at its file offset's residue modulo 4 KiB (O_DIRECT), so the
// slot is what the runtime allocates, byte for byte; a tensor with no file position gets
// the worst case, one spare block.
LayerReads layer_reads(std::vector<const TensorDesc*> layer) {
  std::sort(layer.begin(), layer.end(), [](const TensorDesc* a, const TensorDesc* b) {
    return std::tie(a->split, a->offset) < std::tie(b->split, b->offset);
  });
  LayerReads r;
  uint64_t cursor = 0, run_head = 0, run_end = 0;
  const auto close_run = [&] {
    if (r.sizes.empty()) return;
    const uint64_t at = align_up(cursor) + run_head;
    cursor = at + r.sizes.back();
  };
  for (size_t i = 0; i < layer.size(); ++i) {
    const TensorDesc& t = *layer[i];
    const bool joins = i > 0 && t.file_index >= 0 && layer[i - 1]->file_index >= 0 &&
                       t.split == layer[i - 1]->split && t.offset <= run_end + kAlign;
    if (joins) {
      r.sizes.back() += t.offset + t.bytes - run_end;
    } else {
      close_run();
      r.sizes.push_back(t.bytes);
      run_head = t.file_index >= 0 ? t.offset % kAlign : kAlign;
    }
    run_end = t.offset + t.bytes;
  }
  close_run();
  r.slot_bytes = align_up(cursor);
  return r;
}

}  // namespace hypura::scheduler::detail
