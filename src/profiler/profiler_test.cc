#include "profiler/profiler.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "io/aligned_buffer.h"
#include "profiler/decode_rates.h"
#include "profiler/hardware_profile.h"
#include "profiler/storage_bench.h"
#include "profiler/system_info.h"

namespace hypura::profiler {
namespace {

FileReader fake_fs(std::map<std::string, std::string> files) {
  return [files](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

// This machine's layout: cgroup v1 memory controller at /sys/fs/cgroup/memory.
constexpr const char* kMountinfoV1 =
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(CgroupLimit, V1TakesTheTightestAncestor) {
  auto read = fake_fs({
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"},
      {"/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "8589934592\n"},
      {"/sys/fs/cgroup/memory/jobs/one/memory.limit_in_bytes", "3221225472\n"},
  });
  auto limit = find_cgroup_memory_limit("4:memory:/jobs/one\n0::/\n", kMountinfoV1, read);
  EXPECT_EQ(limit.version, "v1");
  ASSERT_TRUE(limit.limit_bytes.has_value());
  EXPECT_EQ(*limit.limit_bytes, 3221225472u);
}

TEST(CgroupLimit, V1UnlimitedIsNoLimit) {
  auto read = fake_fs({{"/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "9223372036854771712"}});
  auto limit = find_cgroup_memory_limit("4:memory:/a\n", kMountinfoV1, read);
  EXPECT_EQ(limit.version, "v1");
  EXPECT_FALSE(limit.limit_bytes.has_value());
}

TEST(CgroupLimit, V2ReadsMemoryMaxAndIgnoresMax) {
  const char* mountinfo = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
  auto read = fake_fs({
      {"/sys/fs/cgroup/user.slice/memory.max", "max\n"},
      {"/sys/fs/cgroup/user.slice/box/memory.max", "4294967296\n"},
  });
  auto limit = find_cgroup_memory_limit("0::/user.slice/box\n", mountinfo, read);
  EXPECT_EQ(limit.version, "v2");
  ASSERT_TRUE(limit.limit_bytes.has_value());
  EXPECT_EQ(*limit.limit_bytes, 4294967296u);
}

TEST(CgroupLimit, ContainerMountRootIsStripped) {
  // Inside a container the hierarchy root is the container's own cgroup.
  const char* mountinfo = "30 23 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
  auto read = fake_fs({{"/sys/fs/cgroup/memory.max", "1073741824"}});
  auto limit = find_cgroup_memory_limit("0::/docker/abc\n", mountinfo, read);
  ASSERT_TRUE(limit.limit_bytes.has_value());
  EXPECT_EQ(*limit.limit_bytes, 1073741824u);
}

TEST(CgroupLimit, NoCgroupsMeansNone) {
  auto limit = find_cgroup_memory_limit("", "", fake_fs({}));
  EXPECT_EQ(limit.version, "none");
  EXPECT_FALSE(limit.limit_bytes.has_value());
}

TEST(SystemInfo, ProbesThisMachine) {
  CpuProfile c = probe_cpu();
  EXPECT_GE(c.physical_cores, 1);
  EXPECT_GE(c.logical_cores, c.physical_cores);
  EXPECT_FALSE(c.simd.empty());
  MemoryProfile m = probe_memory(uint64_t{1} << 30);
  EXPECT_GT(m.total_bytes, 0u);
  EXPECT_LE(m.effective_limit_bytes, m.total_bytes);
  EXPECT_EQ(m.usable_bytes, std::min(m.total_bytes - (uint64_t{1} << 30), m.effective_limit_bytes));
}

HardwareProfile sample_profile() {
  HardwareProfile p;
  p.timestamp = "2026-01-01T00:00:00Z";
  p.source = "test";
  p.cpu = {"Test CPU", 8, 16, "avx2", {"avx2", "fma"}, {}};
  p.cpu.decode = {{gguf::GgmlType::Q4_K, 20e9, 6e-6},
                  {gguf::GgmlType::Q6_K, 16e9, 7e-6},
                  {gguf::GgmlType::Q6_K, 12e9, 8e-6, 576}};
  p.memory.total_bytes = 32ull << 30;
  p.memory.cgroup_limit_bytes = 24ull << 30;
  p.memory.cgroup_version = "v2";
  p.memory.effective_limit_bytes = 24ull << 30;
  p.memory.reserve_bytes = 2ull << 30;
  p.memory.usable_bytes = 24ull << 30;  // min(32 - 2, 24)
  p.memory.read_bandwidth_bps = 50e9;
  p.gpus.push_back({"Test GPU", 16ull << 30, 15ull << 30, 25e9, 10e9, 900e9});
  p.storage.seq_read_bps = 3e9;
  p.storage.best_block_bytes = 1 << 20;
  p.storage.best_queue_depth = 32;  // 32 MiB in flight: kMinBytesInFlight
  p.storage.sequential = {{1 << 20, 32, 3e9}, {1 << 20, 1, 1e9}};
  p.storage.random = {{4096, 1, 12000, 12000 * 4096.0}, {4096, 32, 100000, 100000 * 4096.0}};
  p.fingerprint = machine_fingerprint(p);
  return p;
}

TEST(ProfileJson, RoundTripsEveryField) {
  HardwareProfile p = sample_profile();
  auto back = profile_from_json(profile_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(profile_to_json(*back), profile_to_json(p));
  EXPECT_EQ(back->memory.usable_bytes, 24ull << 30);
  EXPECT_DOUBLE_EQ(back->storage.random_bps(4096, 1), 12000 * 4096.0);
  EXPECT_DOUBLE_EQ(back->storage.random_bps(4096), 100000 * 4096.0);
  EXPECT_DOUBLE_EQ(back->cpu.decode_bps(gguf::GgmlType::Q6_K), 16e9);
  EXPECT_DOUBLE_EQ(back->cpu.decode_bps(gguf::GgmlType::Q8_0), 0) << "not measured";
  EXPECT_DOUBLE_EQ(back->cpu.decode_overhead_s(gguf::GgmlType::Q6_K), 7e-6);
  EXPECT_DOUBLE_EQ(back->cpu.decode_bps(gguf::GgmlType::Q6_K, 576), 12e9);
}

// A tensor's rate is the one measured at the nearest row width, by ratio; a width never
// measured falls back to the type's nearest, and the default width stands for 4096.
TEST(ProfileJson, DecodeRateOfTheNearestWidth) {
  const CpuProfile cpu = sample_profile().cpu;
  using gguf::GgmlType;
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K), 16e9);
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K, 4096), 16e9);
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K, 14336), 16e9);
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K, 576), 12e9);
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K, 896), 12e9);   // 1.6x from 576, 4.6x from 4096
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q6_K, 2048), 16e9);  // 3.6x from 576, 2x from 4096
  EXPECT_DOUBLE_EQ(cpu.decode_overhead_s(GgmlType::Q6_K, 640), 8e-6);
  EXPECT_DOUBLE_EQ(cpu.decode_bps(GgmlType::Q4_K, 576), 20e9) << "the type's only width";
  EXPECT_EQ(cpu.decode_rate(GgmlType::Q8_0, 576), nullptr);
}

// A profile written before the per-product overhead was measured reads it as unknown
// (counted as 0) and add_missing_decode_rates measures that type again, in place.
TEST(ProfileJson, DecodeRateWithoutOverheadIsMeasuredAgain) {
  nlohmann::json j = nlohmann::json::parse(profile_to_json(sample_profile()));
  for (auto& r : j["cpu"]["decode"]) r.erase("overhead_s");
  auto old = profile_from_json(j.dump());
  ASSERT_TRUE(old.is_ok()) << old.status().message();
  EXPECT_EQ(old->cpu.decode_overhead_s(gguf::GgmlType::Q4_K), 0);
  const DecodeShape q4k[] = {{gguf::GgmlType::Q4_K}};
  EXPECT_TRUE(add_missing_decode_rates(*old, q4k));
  ASSERT_EQ(old->cpu.decode.size(), 3u) << "the type was added twice";
  EXPECT_GE(old->cpu.decode[0].overhead_s, 0);
  EXPECT_NE(old->cpu.decode_bps(gguf::GgmlType::Q4_K), 20e9) << "the rate was not measured";
  EXPECT_FALSE(add_missing_decode_rates(*old, q4k)) << "measured again";
}

TEST(ProfileJson, MissingFieldIsNamed) {
  auto r = profile_from_json(R"({"schema_version": 1, "cpu": {}, "memory": {}, "storage": {}})");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("physical_cores"), std::string::npos) << r.status().message();
  EXPECT_FALSE(profile_from_json("{").is_ok());
  EXPECT_EQ(profile_from_json(R"({"schema_version": 99})").status().code(),
            StatusCode::kUnsupported);
}

TEST(Fingerprint, ChangesWithTheMachineNotWithSpeeds) {
  HardwareProfile a = sample_profile(), b = a;
  b.storage.seq_read_bps = 1;
  b.memory.read_bandwidth_bps = 1;
  EXPECT_EQ(machine_fingerprint(a), machine_fingerprint(b));
  b.cpu.physical_cores = 4;
  EXPECT_NE(machine_fingerprint(a), machine_fingerprint(b));
}

TEST(LoadOrMeasure, ProfileFileWinsAndReserveApplies) {
  std::string path =
      ::testing::TempDir() + "hypura_fixture_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(save_profile_file(sample_profile(), path).is_ok());
  ProfileOptions o;
  o.profile_file = path;
  o.reserve_bytes = 4ull << 30;
  auto p = load_or_measure(o);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->memory.usable_bytes, 24ull << 30);  // min(32 - 4, cgroup 24)
  o.reserve_bytes = 10ull << 30;
  EXPECT_EQ(load_or_measure(o)->memory.usable_bytes, 22ull << 30);  // min(32 - 10, 24)
  EXPECT_EQ(p->gpus.at(0).name, "Test GPU");
  std::remove(path.c_str());
  o.profile_file = path;
  EXPECT_EQ(load_or_measure(o).status().code(), StatusCode::kNotFound);
}

// A model that fits is planned from a quick profile: measured once (memory bandwidth and
// the model's decode rates), kept in the quick cache and reused; a rate the cache lacks is
// measured and added; a full cache of another machine is never taken for this one.
TEST(QuickProfile, MeasuredOnceThenReusedAndCompleted) {
  const std::string dir = ::testing::TempDir() + "hypura_quick_" + std::to_string(::getpid()) + "/";
  std::filesystem::create_directories(dir);
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  HardwareProfile other = sample_profile();  // another machine's full profile
  other.fingerprint = "0123456789abcdef";
  std::filesystem::create_directories(std::filesystem::path(default_cache_path()).parent_path());
  ASSERT_TRUE(save_profile_file(other, default_cache_path()).is_ok());

  const DecodeShape q4k[] = {{gguf::GgmlType::Q4_K}};
  HardwareProfile first = load_or_quick_measure(2ull << 30, q4k);
  EXPECT_NE(first.fingerprint, other.fingerprint) << "the other machine's cache was taken";
  EXPECT_GT(first.memory.read_bandwidth_bps, 0);
  EXPECT_GT(first.cpu.decode_bps(gguf::GgmlType::Q4_K), 0);
  EXPECT_EQ(first.cpu.decode_bps(gguf::GgmlType::Q8_0), 0) << "only the model's types";
  ASSERT_TRUE(std::filesystem::exists(quick_cache_path()));

  // Mark the cached copy: a profile measured again would not carry the mark.
  auto marked = load_profile_file(quick_cache_path());
  ASSERT_TRUE(marked.is_ok());
  marked->timestamp = "marked by the test";
  ASSERT_TRUE(save_profile_file(*marked, quick_cache_path()).is_ok());
  const DecodeShape both[] = {{gguf::GgmlType::Q4_K}, {gguf::GgmlType::Q8_0}};
  HardwareProfile second = load_or_quick_measure(2ull << 30, both);
  EXPECT_EQ(second.timestamp, "marked by the test") << "measured again instead of reused";
  EXPECT_EQ(second.memory.read_bandwidth_bps, first.memory.read_bandwidth_bps);
  EXPECT_EQ(second.cpu.decode_bps(gguf::GgmlType::Q4_K),
            first.cpu.decode_bps(gguf::GgmlType::Q4_K));
  EXPECT_GT(second.cpu.decode_bps(gguf::GgmlType::Q8_0), 0) << "the missing rate was not added";
  auto cached = load_profile_file(quick_cache_path());
  ASSERT_TRUE(cached.is_ok());
  EXPECT_GT(cached->cpu.decode_bps(gguf::GgmlType::Q8_0), 0) << "the added rate was not kept";

  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  std::filesystem::remove_all(dir);
}

// A file written with O_DIRECT and dropped from the page cache, then measured.
class StorageBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "hypura_bench_" + std::to_string(::getpid()) + ".bin";
    std::vector<char> data(kBytes);
    std::mt19937 rng(1);
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(path_, std::ios::binary).write(data.data(), kBytes);
    int fd = ::open(path_.c_str(), O_RDONLY);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  static constexpr uint64_t kBytes = 96 << 20;
  std::string path_;
};

// Reads the whole file with buffered read() calls; returns bytes per second.
double buffered_read_bps(const std::string& path) {
  std::vector<char> buf(1 << 20);
  int fd = ::open(path.c_str(), O_RDONLY);
  auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += static_cast<uint64_t>(n);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return static_cast<double>(total) / s;
}

// Pages of `path` in the page cache (mincore over a mapping, which faults nothing in).
size_t resident_pages(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  size_t pages = (bytes + 4095) / 4096, resident = 0;
  std::vector<unsigned char> vec(pages);
  if (map != MAP_FAILED && ::mincore(map, bytes, vec.data()) == 0) {
    for (unsigned char v : vec) resident += v & 1;
  }
  if (map != MAP_FAILED) ::munmap(map, bytes);
  return resident;
}

// The issue's test: the figure is never the page cache's. Measuring leaves the file out of
// the page cache (every read was O_DIRECT); the speeds before and after caching are
// printed (figures, not checks: unit tests assert no wall-clock bounds).
TEST_F(StorageBenchTest, PageCacheDoesNotInflateTheFigure) {
  auto first = measure_sequential_bps(path_, 1 << 20, 8, 0.3);
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_LT(resident_pages(path_, kBytes), kBytes / 4096 / 20)
      << "direct reads went through the page cache";
  buffered_read_bps(path_);                      // fills the page cache
  double cached_bps = buffered_read_bps(path_);  // served from it
  EXPECT_GT(resident_pages(path_, kBytes), kBytes / 4096 / 2);
  auto second = measure_sequential_bps(path_, 1 << 20, 8, 0.3);
  ASSERT_TRUE(second.is_ok());
  std::printf("direct %.2f GB/s, after caching %.2f GB/s, page cache %.2f GB/s\n", *first / 1e9,
              *second / 1e9, cached_bps / 1e9);
}

// A depth-1 best point (a noisy disk, or a profile cached before the rule) is raised so
// streaming keeps kMinBytesInFlight queued; deeper ones are kept.
TEST(ProfileJson, RaisesShallowQueueDepthsOnLoad) {
  HardwareProfile p = sample_profile();
  p.storage.best_block_bytes = 4 << 20;
  p.storage.best_queue_depth = 1;
  auto back = profile_from_json(profile_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->storage.best_queue_depth, StorageProfile::kMinBytesInFlight / (4 << 20));
  p.storage.best_queue_depth = 64;
  back = profile_from_json(profile_to_json(p));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->storage.best_queue_depth, 64u);
}

TEST_F(StorageBenchTest, SmallBenchmarkFillsEveryField) {
  StorageBenchOptions o;
  o.file = path_;
  o.block_sizes = {128 << 10, 1 << 20};
  o.queue_depths = {1, 4};
  o.seconds_per_point = 0.05;
  o.seconds_per_random_point = 0.05;
  o.seconds_confirm = 0.05;
  int calls = 0;
  o.progress = [&](const std::string&, double) { ++calls; };
  auto p = measure_storage(o);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->method, "file");
  EXPECT_EQ(p->test_bytes, kBytes);
  EXPECT_EQ(p->sequential.size(), 4u);
  EXPECT_EQ(p->random.size(), 4u);
  EXPECT_GT(p->seq_read_bps, 0);
  EXPECT_FALSE(p->mount_point.empty());
  EXPECT_GE(uint64_t{p->best_queue_depth} * p->best_block_bytes, StorageProfile::kMinBytesInFlight);
  for (const auto& r : p->random) EXPECT_NEAR(r.iops * r.block_bytes, r.bps, r.bps * 1e-9);
  EXPECT_GT(calls, 8);
}

// Issue 21: bench's same-run disk reference is the profile's sequential grid alone,
// read-only; each grid continues where the last stopped and the fastest point is the max.
TEST_F(StorageBenchTest, SequentialGridAloneContinuesAndPicksTheFastest) {
  StorageBenchOptions o;
  o.block_sizes = {128 << 10, 1 << 20, 16 << 20};
  o.queue_depths = {1, 4};
  o.max_in_flight_bytes = 32 << 20;  // skips 16 MiB x 4
  o.seconds_per_point = 0.03;
  uint64_t cursor = 0;
  auto grid = measure_sequential_grid(path_, o, &cursor);
  ASSERT_TRUE(grid.is_ok()) << grid.status().message();
  ASSERT_EQ(grid->size(), 5u);
  EXPECT_EQ((*grid)[4].block_bytes, uint64_t{16} << 20);
  EXPECT_EQ((*grid)[4].queue_depth, 1u);
  for (const auto& p : *grid) EXPECT_GT(p.bps, 0);
  // Continuity, exactly: with no time per point each point reads just its first two
  // chunks (32 MiB each here), so a grid of 5 points moves the cursor on by 10 chunks
  // modulo the file's 96 MiB. (A timed grid's end position depends on the disk's speed.)
  StorageBenchOptions untimed = o;
  untimed.seconds_per_point = 0;
  const uint64_t chunk = 32 << 20, span = kBytes, step = 10 * chunk;
  uint64_t at = 0;
  ASSERT_TRUE(measure_sequential_grid(path_, untimed, &at).is_ok());
  EXPECT_EQ(at, step % span);
  ASSERT_TRUE(measure_sequential_grid(path_, untimed, &at).is_ok());
  EXPECT_EQ(at, 2 * step % span);
  const SeqReadPoint best = fastest_point(*grid);
  for (const auto& p : *grid) EXPECT_LE(p.bps, best.bps);
  EXPECT_EQ(fastest_point({}).bps, 0);
  EXPECT_FALSE(measure_sequential_grid(path_ + ".missing", o, &cursor).is_ok());
  // In a child process: the same points come back through the pipe, the cursor moves on.
  const uint64_t before_child = at;
  auto child = measure_sequential_grid_in_child(path_, untimed, &at);
  ASSERT_TRUE(child.is_ok()) << child.status().message();
  ASSERT_EQ(child->size(), grid->size());
  for (size_t i = 0; i < child->size(); ++i) {
    EXPECT_EQ((*child)[i].block_bytes, (*grid)[i].block_bytes);
    EXPECT_EQ((*child)[i].queue_depth, (*grid)[i].queue_depth);
    EXPECT_GT((*child)[i].bps, 0);
  }
  EXPECT_EQ(at, (before_child + step) % span);
  EXPECT_FALSE(measure_sequential_grid_in_child(path_ + ".missing", o, &cursor).is_ok());
}

TEST(StorageBench, RefusesWhenTheDiskIsTooSmall) {
  StorageBenchOptions o;
  o.dir = ::testing::TempDir();
  o.scratch_bytes = uint64_t{1} << 50;  // 1 PiB
  auto p = measure_storage(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
}

// Issue 14: the scratch file had a predictable name (.hypura-profile-<pid>.tmp) and was
// opened with O_CREAT | O_TRUNC, following links: in a shared directory another user could
// plant a link there and have a file of ours truncated and overwritten. Now the name is
// random and the open exclusive, and the planted link's target is untouched.
TEST(StorageBench, ScratchFileNeverFollowsAPlantedLink) {
  char tmpl[] = "/tmp/hypura-scratch-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "keep";
  const std::string planted = dir + "/.hypura-profile-" + std::to_string(::getpid()) + ".tmp";
  std::filesystem::create_symlink(victim, planted);
  StorageBenchOptions o;
  o.dir = dir;
  o.scratch_bytes = 16 << 20;
  o.block_sizes = {1 << 20};
  o.queue_depths = {1};
  o.seconds_per_point = o.seconds_per_random_point = o.seconds_confirm = 0.02;
  auto p = measure_storage(o);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  std::string content;
  std::getline(std::ifstream(victim), content);
  EXPECT_EQ(content, "keep");
  EXPECT_EQ(std::filesystem::file_size(victim), 4u);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2u) << "the scratch file was not removed";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hypura::profiler
