// Kills a process (SIGKILL) at random points while it writes each kind of file Hypura
// writes, in a loop, then checks that the file reads back as the old or the new version,
// never a torn one, and that the writer's leftover temporary is removed by the next write
// (issue 39; common/atomic_file.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "eval/perplexity.h"
#include "experts/coactivation.h"
#include "experts/routing_trace.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "profiler/hardware_profile.h"
#include "store/model_store.h"
#include "store/testing/fake_hub.h"

namespace hypura {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class KillWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hypura-kill-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Temporaries left in the directory (names starting with '.').
  int leftovers() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename().string()[0] == '.';
    return n;
  }

  // Writes version 0 once, then `rounds` times: a child process rewrites the file in a loop
  // (versions 1, 0, 1, ...) and is SIGKILLed after a random delay; `read_version` must then
  // return 0 or 1. Each check also writes once more and expects no temporary left over.
  void kill_while_writing(const std::function<Status(int)>& write,
                          const std::function<Result<int>()>& read_version, int rounds = 12) {
    ASSERT_TRUE(write(0).is_ok());
    std::mt19937 rng(7);
    int seen[2] = {0, 0};
    for (int round = 0; round < rounds; ++round) {
      const pid_t child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        for (int v = 1;; v ^= 1) (void)write(v);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 40000));
      ASSERT_EQ(::kill(child, SIGKILL), 0);
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      ASSERT_TRUE(WIFSIGNALED(status));
      Result<int> v = read_version();
      ASSERT_TRUE(v.is_ok()) << "round " << round << ": " << v.status().message();
      ASSERT_TRUE(*v == 0 || *v == 1) << *v;
      ++seen[*v];
      ASSERT_LE(leftovers(), 1);  // at most the killed writer's temporary
      ASSERT_TRUE(write(*v).is_ok());
      ASSERT_EQ(leftovers(), 0) << "the next write removes a killed writer's temporary";
    }
    EXPECT_GT(seen[0] + seen[1], 0);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(KillWrites, PlainFile) {
  const std::string p = path("plain.bin");
  kill_while_writing(
      [&](int v) { return write_file_atomically(p, std::string(1 << 20, v ? 'b' : 'a')); },
      [&]() -> Result<int> {
        const std::string s = read_file(p);
        if (s.size() != (1u << 20)) return corrupt("size " + std::to_string(s.size()));
        if (s.find_first_not_of(s[0]) != std::string::npos) return corrupt("mixed contents");
        return s[0] == 'b' ? 1 : 0;
      });
}

TEST_F(KillWrites, HardwareProfile) {
  const std::string p = path("profile.json");
  kill_while_writing(
      [&](int v) {
        profiler::HardwareProfile hp;
        hp.source = "version " + std::to_string(v);
        hp.cpu.model = std::string(200000, 'x');  // big enough to be caught mid-write
        return profiler::save_profile_file(hp, p);
      },
      [&]() -> Result<int> {
        HYPURA_ASSIGN_OR_RETURN(profiler::HardwareProfile hp, profiler::load_profile_file(p));
        return hp.source == "version 1" ? 1 : hp.source == "version 0" ? 0 : -1;
      });
}

TEST_F(KillWrites, ExpertStatistics) {
  const std::string p = path("experts.json");
  constexpr int kLayers = 16, kExperts = 64;
  kill_while_writing(
      [&](int v) {
        experts::CoactivationStats stats(kLayers, kExperts);
        std::vector<int32_t> selected(4);
        for (int t = 0; t < 1 + v; ++t) {
          for (int l = 0; l < kLayers; ++l) {
            for (int i = 0; i < 4; ++i) selected[i] = (l * 7 + i * 13 + t) % kExperts;
            stats.observe(l, selected, 4);
          }
        }
        return stats.save(p);
      },
      [&]() -> Result<int> {
        HYPURA_ASSIGN_OR_RETURN(experts::CoactivationStats s,
                                experts::CoactivationStats::load(p, kLayers, kExperts));
        return static_cast<int>(s.tokens()) - 1;
      });
}

TEST_F(KillWrites, RoutingTrace) {
  const std::string p = path("trace.txt");
  kill_while_writing(
      [&](int v) {
        experts::RoutingTrace t;
        t.n_layer = 4;
        t.n_expert = 32;
        t.n_expert_used = 2;
        const int32_t selected[2] = {v, 31};
        for (uint32_t pass = 0; pass < 20000; ++pass)
          t.add(pass, static_cast<int>(pass % 4), selected, 2);
        return t.write(p);
      },
      [&]() -> Result<int> {
        HYPURA_ASSIGN_OR_RETURN(experts::RoutingTrace t, experts::RoutingTrace::read(p));
        if (t.records.size() != 20000)
          return corrupt("records " + std::to_string(t.records.size()));
        return t.records.back().selected[0];
      });
}

TEST_F(KillWrites, SavedLogProbs) {
  const std::string p = path("logits.bin");
  constexpr int64_t kVocab = 4096, kCtx = 16;
  kill_while_writing(
      [&](int v) -> Status {
        std::vector<int32_t> tokens(kCtx, v);
        HYPURA_ASSIGN_OR_RETURN(auto w, eval::LogProbWriter::create(p, kVocab, kCtx, 1, tokens));
        std::vector<double> row(kVocab, -8.0);
        for (int64_t i = 0; i < eval::scored_per_chunk(kCtx); ++i)
          HYPURA_RETURN_IF_ERROR(w->write_row(row));
        return w->close();
      },
      [&]() -> Result<int> {
        HYPURA_ASSIGN_OR_RETURN(auto r, eval::LogProbReader::open(p));
        return r->tokens().front();
      });
}

TEST_F(KillWrites, SynthesizedModel) {
  const std::string p = path("model.gguf");
  kill_while_writing(
      [&](int v) {
        gguf::GgufWriter w;
        w.add_u32("test.version", static_cast<uint32_t>(v));
        w.add_tensor("weights", gguf::GgmlType::F32, {1024, 512});
        return w.write(p, [&](size_t, uint64_t, std::span<uint8_t> out) {
          std::fill(out.begin(), out.end(), static_cast<uint8_t>(v));
          return Status::ok();
        });
      },
      [&]() -> Result<int> {
        HYPURA_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open(p));
        auto v = f.metadata().get_u64("test.version");
        if (!v) return corrupt("no version");
        return static_cast<int>(*v);
      });
}

// A writer that fails (or is destroyed unfinished) leaves the old file and no temporary.
// `hypura pull` killed mid-download, in a loop: the manifest always reads, a listed model's
// file is whole, a part left behind is a prefix of the file, and the next pull completes it.
TEST_F(KillWrites, PulledModel) {
  store::testing::FakeHub hub;
  hub.slow_ms_ = 2;  // 3 MiB in 48 chunks: about 0.1 s a pull
  store::PullOptions o;
  o.endpoint = hub.endpoint();
  o.http.retry_delay_ms = 10;
  const std::string& bytes = hub.files_["m-Q4_K_M.gguf"];
  const std::string file = path("hf.co/org/repo/m-Q4_K_M.gguf");
  const store::ModelStore models(dir_.string());
  std::mt19937 rng(11);
  int parts_seen = 0;
  for (int round = 0; round < 8; ++round) {
    if (round == 4) fs::remove(file);  // pulled whole once: download it again
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(models.pull("hf.co/org/repo", o, nullptr).is_ok() ? 0 : 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 60));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    Result<std::vector<store::StoredModel>> listed = models.list();
    ASSERT_TRUE(listed.is_ok()) << "round " << round << ": " << listed.status().message();
    if (fs::exists(file)) {
      EXPECT_EQ(read_file(file), bytes) << "round " << round;
    }
    if (fs::exists(file + ".part")) {
      const std::string part = read_file(file + ".part");
      EXPECT_EQ(part, bytes.substr(0, part.size())) << "round " << round;
      ++parts_seen;
    }
  }
  EXPECT_GT(parts_seen, 0) << "no kill landed mid-download";
  Result<store::StoredModel> m = models.pull("hf.co/org/repo", o, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(read_file(file), bytes);
}

TEST_F(KillWrites, AbandonedWriteKeepsTheOldFile) {
  const std::string p = path("kept.txt");
  ASSERT_TRUE(write_file_atomically(p, "old").is_ok());
  {
    auto f = AtomicFile::create(p);
    ASSERT_TRUE(f.is_ok());
    ASSERT_TRUE(f->write(std::string_view("new, unfinished")).is_ok());
    EXPECT_EQ(leftovers(), 1);
  }
  EXPECT_EQ(leftovers(), 0);
  EXPECT_EQ(read_file(p), "old");
}

// A link is followed: the file it names gets the new contents and the link stays a link.
TEST_F(KillWrites, SymbolicLinkKeepsPointingAtTheNewFile) {
  const std::string target = path("target.txt"), link = path("link.txt");
  ASSERT_TRUE(write_file_atomically(target, "old").is_ok());
  fs::create_symlink(target, link);
  ASSERT_TRUE(write_file_atomically(link, "new").is_ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_file(target), "new");
  EXPECT_EQ(leftovers(), 0);
}

// A pipe (like /dev/null, not a regular file) is written in place, never replaced.
TEST_F(KillWrites, PipeIsWrittenInPlace) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_file(fifo); });
  EXPECT_TRUE(write_file_atomically(fifo, "through the pipe").is_ok());
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(leftovers(), 0);
}

}  // namespace
}  // namespace hypura
