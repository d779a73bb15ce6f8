#include "tiers/streaming_provider.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <deque>

#include "common/size.h"
#include "io/aligned_buffer.h"
#include "tiers/tensor_view.h"

namespace hypura::tiers {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAlign = io::kDirectAlignment;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "blk.12.ffn_up.weight" -> 12; -1 for tensors outside the layer stack.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int layer = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    layer = layer * 10 + (name[i++] - '0');
  }
  return (i < name.size() && name[i] == '.') ? layer : -1;
}

}  // namespace

Result<std::unique_ptr<StreamingProvider>> StreamingProvider::create(const gguf::GgufFile& file,
                                                                     StreamingConfig config,
                                                                     MemoryLedger& ledger,
                                                                     const Progress& progress) {
  if (config.streamed.size() != file.tensors().size()) {
    return invalid_argument("streaming config covers " + std::to_string(config.streamed.size()) +
                            " tensors; the model has " + std::to_string(file.tensors().size()));
  }
  if (!config.absent.empty() && config.absent.size() != file.tensors().size()) {
    return invalid_argument("streaming config's absent tensors cover " +
                            std::to_string(config.absent.size()) + " tensors; the model has " +
                            std::to_string(file.tensors().size()));
  }
  std::unique_ptr<StreamingProvider> p(new StreamingProvider(file, ledger));
  p->absent_ = config.absent;
  HYPURA_RETURN_IF_ERROR(p->build_layout(config));
  HYPURA_ASSIGN_OR_RETURN(p->storages_,
                          io::Storage::open_all(file.paths(), config.storage, config.make_queue));
  const int n_slots = p->stream_layers_.empty() ? 0 : std::max(2, config.n_slots);
  p->depth_ = std::clamp(config.prefetch_depth, 1, std::max(1, n_slots - 1));
  // The pool first: it is small, and a budget refusal should come before a long load.
  HYPURA_RETURN_IF_ERROR(p->allocate_pool(n_slots));
  HYPURA_RETURN_IF_ERROR(p->load_resident(config.lock_resident, progress));
  return p;
}

StreamingProvider::~StreamingProvider() {
  // Reads in flight write into slots: wait for them before the buffers go.
  for (Slot& s : slots_) (void)io::wait_all(storages_, s.reads);
}

std::string StreamingProvider::name() const {
  return stream_layers_.empty() ? "resident(direct-io)" : "streaming";
}

// Stream groups are indexed by layer + 1: group 0 holds streamed tensors outside the
// layer stack (acquired as layer -1 at the start of a pass and held to its end).
Status StreamingProvider::build_layout(const StreamingConfig& config) {
  const auto& tensors = file_.tensors();
  locations_.assign(tensors.size(), Location{});
  int n_layer = 0;
  for (const auto& t : tensors) n_layer = std::max(n_layer, layer_of(t.name) + 1);
  stream_of_layer_.assign(static_cast<size_t>(n_layer) + 1, -1);
  for (size_t id = 0; id < tensors.size(); ++id) {
    if (config.streamed[id]) stream_of_layer_[layer_of(tensors[id].name) + 1] = 0;
  }
  for (int key = 0; key <= n_layer; ++key) {
    if (stream_of_layer_[key] < 0) continue;
    stream_of_layer_[key] = static_cast<int>(stream_layers_.size());
    stream_layers_.push_back(StreamLayer{key - 1, {}, {}, 0});
  }
  std::vector<std::vector<bool>> wanted(stream_layers_.size(),
                                        std::vector<bool>(tensors.size(), false));
  for (size_t id = 0; id < tensors.size(); ++id) {
    if (!config.streamed[id]) continue;
    const int s = stream_of_layer_[layer_of(tensors[id].name) + 1];
    wanted[s][id] = true;
    locations_[id].stream = s;
    stream_layers_[s].tensors.push_back(static_cast<model::TensorId>(id));
    stream_layers_[s].bytes += tensors[id].n_bytes;
    bytes_per_pass_ += tensors[id].n_bytes;
  }
  // Each run sits in its slot at the file offset's residue modulo the alignment, so
  // Storage reads it straight into place (only its head and tail blocks are bounced).
  for (size_t s = 0; s < stream_layers_.size(); ++s) {
    uint64_t cursor = 0;
    for (const TensorRun& run : merge_runs(file_, wanted[s])) {
      const uint64_t off = io::align_up(cursor, kAlign) + run.begin % kAlign;
      stream_layers_[s].reads.push_back({run.file_index, run.begin, run.end - run.begin, off});
      for (model::TensorId id : run.tensors)
        locations_[id].slot_offset = off + (tensors[id].offset - run.begin);
      cursor = off + (run.end - run.begin);
    }
    slot_bytes_ = std::max(slot_bytes_, io::align_up(cursor, kAlign));
  }
  return Status::ok();
}

Status StreamingProvider::allocate_pool(int n_slots) {
  slots_.resize(static_cast<size_t>(n_slots));
  for (int i = 0; i < n_slots; ++i) {
    HYPURA_ASSIGN_OR_RETURN(slots_[i].buffer,
                            ledger_.allocate(MemoryKind::kStreamPool, slot_bytes_,
                                             "stream pool slot " + std::to_string(i)));
  }
  return Status::ok();
}

Status StreamingProvider::load_resident(bool lock, const Progress& progress) {
  std::vector<bool> wanted(file_.tensors().size());
  for (size_t id = 0; id < wanted.size(); ++id) {
    wanted[id] = locations_[id].stream < 0 && !(id < absent_.size() && absent_[id]);
  }
  HYPURA_ASSIGN_OR_RETURN(resident_, load_resident_tensors(file_, wanted, storages_, ledger_,
                                                           "resident weights", lock, progress));
  for (size_t id = 0; id < wanted.size(); ++id) locations_[id].resident = resident_.data[id];
  stats_.load_seconds = resident_.seconds;
  stats_.resident_bytes = resident_.bytes;
  stats_.resident_locked = resident_.locked;
  return Status::ok();
}

// ---- the pool ------------------------------------------------------------------------

int StreamingProvider::find_slot(int stream) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].stream == stream && slots_[i].state != SlotState::kFree) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool StreamingProvider::is_held(int stream) const {
  return find_slot(stream) >= 0;
}

int StreamingProvider::count_ahead() const {
  int n = 0;
  for (const Slot& s : slots_) {
    n += s.state == SlotState::kReading || s.state == SlotState::kReady;
  }
  return n;
}

void StreamingProvider::issue(int slot, int stream) {
  Slot& s = slots_[slot];
  assert(s.state == SlotState::kFree && s.reads.empty());
  s.stream = stream;
  s.state = SlotState::kReading;
  const StreamLayer& sl = stream_layers_[stream];
  for (const LayerRead& r : sl.reads) {
    std::span<uint8_t> dst(s.buffer.data() + r.slot_offset, r.length);
    s.reads.push_back({r.file_index, storages_[r.file_index]->submit(r.offset, dst)});
  }
  stats_.bytes_read += sl.bytes;
  stats_.layers_read++;
}

// Starts reads for the next layers in cyclic order while a free slot is next in the ring
// and fewer than depth_ layers are read ahead. Never touches a slot in use or reading.
void StreamingProvider::top_up() {
  if (slots_.empty()) return;
  while (count_ahead() < depth_) {
    Slot& next = slots_[next_slot_];
    if (next.state != SlotState::kFree) return;  // reuse strictly in ring order
    if (is_held(next_stream_)) return;           // already read ahead (tiny pools)
    issue(next_slot_, next_stream_);
    next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
    next_stream_ = (next_stream_ + 1) % static_cast<int>(stream_layers_.size());
  }
}

Status StreamingProvider::wait_slot(int slot) {
  Slot& s = slots_[slot];
  Status first = io::wait_all(storages_, s.reads);
  if (!first.is_ok()) {
    s.state = SlotState::kFree;
    s.stream = -1;
    return first;
  }
  if (s.state == SlotState::kReading) s.state = SlotState::kReady;
  return Status::ok();
}

// Forgets every read-ahead slot (waiting for its reads first): the pass went off the
// expected order, e.g. after an error.
void StreamingProvider::drain_unused() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != SlotState::kReading && s.state != SlotState::kReady) continue;
    (void)wait_slot(static_cast<int>(i));
    s.state = SlotState::kFree;
    s.stream = -1;
  }
}

Status StreamingProvider::ensure_ready(int layer, int* slot_out) {
  const int stream = stream_of_layer_[layer + 1];
  int slot = find_slot(stream);
  if (slot >= 0 && slots_[slot].state == SlotState::kInUse) {
    *slot_out = slot;
    return Status::ok();
  }
  if (slot < 0) {
    // Not read ahead: restart the cyclic order at this layer.
    stats_.demand_reads++;
    drain_unused();
    int free_slot = -1;
    for (size_t k = 0; k < slots_.size() && free_slot < 0; ++k) {
      const int i = static_cast<int>((next_slot_ + k) % slots_.size());
      if (slots_[i].state == SlotState::kFree) free_slot = i;
    }
    if (free_slot < 0) {
      return resource_exhausted("stream pool: all " + std::to_string(slots_.size()) +
                                " slots are in use when layer " + std::to_string(layer) +
                                " needs one");
    }
    next_slot_ = free_slot;
    next_stream_ = stream;
    top_up();
    slot = find_slot(stream);
    assert(slot >= 0);
  }
  const auto t0 = Clock::now();
  Status st = wait_slot(slot);
  stats_.stall_seconds += seconds_since(t0);
  if (!st.is_ok()) return st.with_context("streamed weights");  // the forward names the layer
  slots_[slot].state = SlotState::kInUse;
  top_up();
  *slot_out = slot;
  return Status::ok();
}

Status StreamingProvider::view(int layer, model::TensorId id, compute::WeightView* out) {
  const Location& loc = locations_[static_cast<size_t>(id)];
  if (loc.stream < 0) {
    if (loc.resident == nullptr) {
      return invalid_argument("tensor '" + file_.tensors()[id].name +
                              "' is not held in host memory (the GPU holds it)");
    }
    *out = tensor_view(file_.tensors()[id], loc.resident);
    return Status::ok();
  }
  const int owner = stream_layers_[loc.stream].layer;
  if (owner != layer) {
    return invalid_argument("tensor '" + file_.tensors()[id].name + "' requested for layer " +
                            std::to_string(layer) + " but it streams with layer " +
                            std::to_string(owner));
  }
  int slot = -1;
  HYPURA_RETURN_IF_ERROR(ensure_ready(layer, &slot));
  *out = tensor_view(file_.tensors()[id], slots_[slot].buffer.data() + loc.slot_offset);
  return Status::ok();
}

Status StreamingProvider::begin_pass() {
  stats_.passes++;
  top_up();  // the first layers of this pass, if not already read ahead
  return Status::ok();
}

Status StreamingProvider::acquire(int layer, std::span<const model::TensorId> ids,
                                  std::span<compute::WeightView> out) {
  for (size_t i = 0; i < ids.size(); ++i) HYPURA_RETURN_IF_ERROR(view(layer, ids[i], &out[i]));
  return Status::ok();
}

Status StreamingProvider::acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                                          std::span<compute::WeightView> out) {
  for (size_t i = 0; i < requests.size(); ++i) {
    compute::WeightView whole;
    HYPURA_RETURN_IF_ERROR(view(layer, requests[i].tensor, &whole));
    out[i] = expert_view(file_.tensors()[requests[i].tensor], whole, requests[i].expert);
  }
  return Status::ok();
}

void StreamingProvider::release(int layer) {
  const int key = layer + 1;
  if (key >= 0 && key < static_cast<int>(stream_of_layer_.size()) && stream_of_layer_[key] >= 0) {
    const int slot = find_slot(stream_of_layer_[key]);
    if (slot >= 0 && slots_[slot].state == SlotState::kInUse) {
      slots_[slot].state = SlotState::kFree;
      slots_[slot].stream = -1;
    }
  }
  top_up();
}

Result<double> StreamingProvider::measure_io_only_bps(double seconds) {
  if (stream_layers_.empty()) return 0.0;
  std::vector<compute::WeightView> views;
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  do {
    HYPURA_RETURN_IF_ERROR(begin_pass());
    for (const StreamLayer& sl : stream_layers_) {
      views.resize(sl.tensors.size());
      HYPURA_RETURN_IF_ERROR(acquire(sl.layer, sl.tensors, views));
      release(sl.layer);
      bytes += sl.bytes;
    }
  } while (seconds_since(t0) < seconds);
  return static_cast<double>(bytes) / seconds_since(t0);
}

StreamingStats StreamingProvider::stats() const {
  StreamingStats s = stats_;
  s.unconsumed_bytes = 0;
  for (const Slot& slot : slots_) {
    if (slot.state == SlotState::kReading || slot.state == SlotState::kReady) {
      s.unconsumed_bytes += stream_layers_[slot.stream].bytes;
    }
  }
  return s;
}

std::vector<StreamingProvider::SlotInfo> StreamingProvider::slot_info() const {
  std::vector<SlotInfo> out;
  for (const Slot& s : slots_) {
    SlotInfo info;
    info.layer = s.state == SlotState::kFree ? -1 : stream_layers_[s.stream].layer;
    info.in_use = s.state == SlotState::kInUse;
    info.reading = s.state == SlotState::kReading;
    out.push_back(info);
  }
  return out;
}

}  // namespace hypura::tiers
