#include "profiler/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"

namespace hypura::profiler {
namespace {

using nlohmann::json;

json cpu_json(const CpuProfile& c) {
  json decode = json::array();
  for (const DecodeRate& r : c.decode) {
    decode.push_back({{"type", gguf::type_name(r.type)},
                      {"type_id", static_cast<uint32_t>(r.type)},
                      {"bps", r.bps},
                      {"overhead_s", r.overhead_s},
                      {"n_cols", r.n_cols}});
  }
  return {{"model", c.model},
          {"physical_cores", c.physical_cores},
          {"logical_cores", c.logical_cores},
          {"simd", c.simd},
          {"flags", c.flags},
          {"decode", decode}};
}

json memory_json(const MemoryProfile& m) {
  json j = {{"total_bytes", m.total_bytes},
            {"available_bytes", m.available_bytes},
            {"cgroup_version", m.cgroup_version},
            {"cgroup_limit_bytes", nullptr},
            {"effective_limit_bytes", m.effective_limit_bytes},
            {"reserve_bytes", m.reserve_bytes},
            {"usable_bytes", m.usable_bytes},
            {"read_bandwidth_bps", m.read_bandwidth_bps},
            {"unified", m.unified}};
  if (m.cgroup_limit_bytes) j["cgroup_limit_bytes"] = *m.cgroup_limit_bytes;
  return j;
}

json gpu_json(const GpuProfile& g) {
  return {{"name", g.name},
          {"total_bytes", g.total_bytes},
          {"free_bytes", g.free_bytes},
          {"h2d_pinned_bps", g.h2d_pinned_bps},
          {"h2d_pageable_bps", g.h2d_pageable_bps},
          {"memory_bandwidth_bps", g.memory_bandwidth_bps}};
}

json storage_json(const StorageProfile& s) {
  json seq = json::array(), rnd = json::array();
  for (const auto& p : s.sequential) {
    seq.push_back({{"block_bytes", p.block_bytes}, {"queue_depth", p.queue_depth}, {"bps", p.bps}});
  }
  for (const auto& p : s.random) {
    rnd.push_back({{"block_bytes", p.block_bytes},
                   {"queue_depth", p.queue_depth},
                   {"iops", p.iops},
                   {"bps", p.bps}});
  }
  return {{"path", s.path},
          {"mount_point", s.mount_point},
          {"device", s.device},
          {"device_id", s.device_id},
          {"method", s.method},
          {"test_bytes", s.test_bytes},
          {"direct", s.direct},
          {"engine", s.engine},
          {"seq_read_bps", s.seq_read_bps},
          {"best_block_bytes", s.best_block_bytes},
          {"best_queue_depth", s.best_queue_depth},
          {"sequential", seq},
          {"random", rnd}};
}

// Optional fields default; required ones throw json::out_of_range naming the key.
template <typename T>
void get_opt(const json& j, const char* key, T& out) {
  if (j.contains(key) && !j[key].is_null()) out = j[key].get<T>();
}

CpuProfile parse_cpu(const json& j) {
  CpuProfile c;
  get_opt(j, "model", c.model);
  c.physical_cores = j.at("physical_cores").get<int>();
  get_opt(j, "logical_cores", c.logical_cores);
  if (c.logical_cores == 0) c.logical_cores = c.physical_cores;
  get_opt(j, "simd", c.simd);
  get_opt(j, "flags", c.flags);
  for (const auto& r : j.value("decode", json::array())) {
    const uint32_t id = r.at("type_id").get<uint32_t>();
    if (gguf::type_traits(id) == nullptr) continue;  // a type this build does not know
    c.decode.push_back({static_cast<gguf::GgmlType>(id), r.at("bps").get<double>(),
                        r.value("overhead_s", -1.0), r.value("n_cols", int64_t{0})});
  }
  return c;
}

MemoryProfile parse_memory(const json& j) {
  MemoryProfile m;
  m.total_bytes = j.at("total_bytes").get<uint64_t>();
  get_opt(j, "available_bytes", m.available_bytes);
  if (j.contains("cgroup_limit_bytes") && !j["cgroup_limit_bytes"].is_null()) {
    m.cgroup_limit_bytes = j["cgroup_limit_bytes"].get<uint64_t>();
  }
  m.cgroup_version = j.value("cgroup_version", std::string("none"));
  m.effective_limit_bytes = j.value("effective_limit_bytes", m.total_bytes);
  if (m.cgroup_limit_bytes && *m.cgroup_limit_bytes < m.effective_limit_bytes) {
    m.effective_limit_bytes = *m.cgroup_limit_bytes;
  }
  get_opt(j, "reserve_bytes", m.reserve_bytes);
  m.usable_bytes = usable_memory(m, m.reserve_bytes);
  m.read_bandwidth_bps = j.at("read_bandwidth_bps").get<double>();
  get_opt(j, "unified", m.unified);
  return m;
}

GpuProfile parse_gpu(const json& j) {
  GpuProfile g;
  get_opt(j, "name", g.name);
  g.total_bytes = j.at("total_bytes").get<uint64_t>();
  g.free_bytes = j.value("free_bytes", g.total_bytes);
  get_opt(j, "h2d_pinned_bps", g.h2d_pinned_bps);
  get_opt(j, "h2d_pageable_bps", g.h2d_pageable_bps);
  get_opt(j, "memory_bandwidth_bps", g.memory_bandwidth_bps);
  return g;
}

StorageProfile parse_storage(const json& j) {
  StorageProfile s;
  get_opt(j, "path", s.path);
  get_opt(j, "mount_point", s.mount_point);
  get_opt(j, "device", s.device);
  get_opt(j, "device_id", s.device_id);
  get_opt(j, "method", s.method);
  get_opt(j, "test_bytes", s.test_bytes);
  get_opt(j, "direct", s.direct);
  get_opt(j, "engine", s.engine);
  s.seq_read_bps = j.at("seq_read_bps").get<double>();
  s.best_block_bytes = j.value("best_block_bytes", uint64_t{1} << 20);
  s.best_queue_depth = j.value("best_queue_depth", 32u);
  s.apply_min_in_flight();  // profiles cached before the rule existed
  for (const auto& p : j.value("sequential", json::array())) {
    s.sequential.push_back({p.at("block_bytes").get<uint64_t>(),
                            p.at("queue_depth").get<uint32_t>(), p.at("bps").get<double>()});
  }
  for (const auto& p : j.value("random", json::array())) {
    s.random.push_back({p.at("block_bytes").get<uint64_t>(), p.at("queue_depth").get<uint32_t>(),
                        p.value("iops", 0.0), p.at("bps").get<double>()});
  }
  return s;
}

}  // namespace

std::string decode_shape_name(const DecodeRate& r) {
  std::string name = gguf::type_name(r.type);
  return r.n_cols > 0 ? name + "x" + std::to_string(r.n_cols) : name;
}

const DecodeRate* CpuProfile::decode_rate(gguf::GgmlType type, int64_t n_cols) const {
  // Widths compare by ratio (576 is nearer 1024 than 4096); 0 stands for the probe's default.
  const auto width = [](int64_t c) { return static_cast<double>(c > 0 ? c : kDefaultDecodeCols); };
  const DecodeRate* best = nullptr;
  double best_distance = 0;
  for (const DecodeRate& r : decode) {
    if (r.type != type) continue;
    const double distance = std::abs(std::log(width(r.n_cols) / width(n_cols)));
    if (best == nullptr || distance < best_distance) {
      best = &r;
      best_distance = distance;
    }
  }
  return best;
}

double CpuProfile::decode_bps(gguf::GgmlType type, int64_t n_cols) const {
  const DecodeRate* r = decode_rate(type, n_cols);
  return r != nullptr ? r->bps : 0;
}

double CpuProfile::decode_overhead_s(gguf::GgmlType type, int64_t n_cols) const {
  const DecodeRate* r = decode_rate(type, n_cols);
  return r != nullptr ? std::max(0.0, r->overhead_s) : 0;
}

const DecodeRate* CpuProfile::measured(const DecodeShape& shape) const {
  for (const DecodeRate& r : decode) {
    if (r.type == shape.type && r.n_cols == shape.n_cols) return &r;
  }
  return nullptr;
}

void CpuProfile::set_decode(const DecodeRate& r) {
  if (const DecodeRate* same = measured({r.type, r.n_cols})) {
    decode[static_cast<size_t>(same - decode.data())] = r;
  } else {
    decode.push_back(r);
  }
}

uint64_t usable_memory(const MemoryProfile& m, uint64_t reserve) {
  uint64_t machine = m.total_bytes > reserve ? m.total_bytes - reserve : 0;
  uint64_t limit = m.cgroup_limit_bytes ? std::min(machine, *m.cgroup_limit_bytes) : machine;
  return std::min(limit, m.effective_limit_bytes);
}

void StorageProfile::apply_min_in_flight() {
  if (best_block_bytes == 0) return;
  const uint64_t depth = (kMinBytesInFlight + best_block_bytes - 1) / best_block_bytes;
  best_queue_depth = static_cast<uint32_t>(std::max<uint64_t>(best_queue_depth, depth));
}

double StorageProfile::random_bps(uint64_t block_bytes, uint32_t max_queue_depth) const {
  double best = 0;
  for (const auto& p : random) {
    if (p.block_bytes == block_bytes && p.queue_depth <= max_queue_depth)
      best = std::max(best, p.bps);
  }
  return best;
}

std::string profile_to_json(const HardwareProfile& p) {
  json gpus = json::array();
  for (const auto& g : p.gpus) gpus.push_back(gpu_json(g));
  json j = {{"schema_version", p.schema_version},
            {"timestamp", p.timestamp},
            {"fingerprint", p.fingerprint},
            {"source", p.source},
            {"cpu", cpu_json(p.cpu)},
            {"memory", memory_json(p.memory)},
            {"gpus", gpus},
            {"storage", storage_json(p.storage)}};
  return j.dump(2) + "\n";
}

Result<HardwareProfile> profile_from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    HardwareProfile p;
    p.schema_version = j.at("schema_version").get<int>();
    if (p.schema_version != kProfileSchemaVersion) {
      return unsupported("profile schema_version " + std::to_string(p.schema_version) +
                         " (this build reads " + std::to_string(kProfileSchemaVersion) + ")");
    }
    get_opt(j, "timestamp", p.timestamp);
    get_opt(j, "fingerprint", p.fingerprint);
    get_opt(j, "source", p.source);
    p.cpu = parse_cpu(j.at("cpu"));
    p.memory = parse_memory(j.at("memory"));
    for (const auto& g : j.value("gpus", json::array())) p.gpus.push_back(parse_gpu(g));
    p.storage = parse_storage(j.at("storage"));
    return p;
  } catch (const json::exception& e) {
    return corrupt(std::string("profile JSON: ") + e.what());
  }
}

Result<HardwareProfile> load_profile_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto p = profile_from_json(ss.str());
  if (!p.is_ok()) return p.status().with_context(path);
  return p;
}

Status save_profile_file(const HardwareProfile& profile, const std::string& path) {
  return write_file_atomically(path, profile_to_json(profile));
}

}  // namespace hypura::profiler
