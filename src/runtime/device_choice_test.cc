// The device rule (decide_device) on given facts: no GPU needed.
#include "runtime/device_choice.h"

#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"

namespace hypura::runtime {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

DeviceFacts h200() {
  DeviceFacts f;
  f.built_with_cuda = true;
  f.n_devices = 1;
  f.gpu_name = "NVIDIA H200";
  f.total_bytes = 140 * kGiB;
  f.free_bytes = 139 * kGiB;
  return f;
}

TEST(DeviceChoice, ParsesTheThreeNames) {
  EXPECT_EQ(*parse_device("auto"), DeviceRequest::kAuto);
  EXPECT_EQ(*parse_device("cpu"), DeviceRequest::kCpu);
  EXPECT_EQ(*parse_device("cuda"), DeviceRequest::kCuda);
  auto bad = parse_device("gpu");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The GPU tier's budget: the free memory less the reserve, capped by --vram-budget (the
// planner then decides how much of the model goes there).
TEST(DeviceChoice, AutoTakesTheGpuWithItsBudget) {
  auto c = decide_device(DeviceRequest::kAuto, h200());
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->kind, DeviceKind::kCuda);
  EXPECT_EQ(c->reserve_bytes, 7 * kGiB);  // 5% of 140 GiB
  EXPECT_EQ(c->gpu_bytes, 132 * kGiB);
  EXPECT_NE(c->reason.find("NVIDIA H200"), std::string::npos);
  DeviceFacts capped = h200();
  capped.vram_budget = 8 * kGiB;
  auto small = decide_device(DeviceRequest::kCuda, capped);
  ASSERT_TRUE(small.is_ok());
  EXPECT_EQ(small->gpu_bytes, 8 * kGiB);
  EXPECT_NE(small->reason.find("--vram-budget"), std::string::npos);
}

TEST(DeviceChoice, AutoFallsBackToTheCpuWithTheReason) {
  DeviceFacts full = h200();
  full.free_bytes = 6 * kGiB;  // within the reserve
  DeviceFacts none = h200();
  none.n_devices = 0;
  DeviceFacts f32 = h200();
  f32.kv_f32 = true;
  DeviceFacts odd = h200();
  odd.model_supported = unsupported("tensor 'x' is IQ2_XS");
  DeviceFacts nobuild;
  for (const auto& [facts, why] :
       {std::pair{full, "reserve"}, std::pair{none, "no CUDA device"}, std::pair{f32, "F16"},
        std::pair{odd, "IQ2_XS"}, std::pair{nobuild, "no CUDA backend"}}) {
    auto c = decide_device(DeviceRequest::kAuto, facts);
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->kind, DeviceKind::kCpu);
    EXPECT_NE(c->reason.find(why), std::string::npos) << c->reason;
    // Forced: the same reason, as an error.
    auto forced = decide_device(DeviceRequest::kCuda, facts);
    ASSERT_FALSE(forced.is_ok());
    EXPECT_NE(forced.status().message().find(why), std::string::npos);
  }
  auto full_forced = decide_device(DeviceRequest::kCuda, full);
  EXPECT_EQ(full_forced.status().code(), StatusCode::kResourceExhausted);
}

TEST(DeviceChoice, CpuIsAlwaysTheCpu) {
  auto c = decide_device(DeviceRequest::kCpu, h200());
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->kind, DeviceKind::kCpu);
}

// inspect --plan --profile FILE: the GPU a profile describes decides, on a machine without one.
TEST(DeviceChoice, FromAProfileTakesItsGpu) {
#if !HYPURA_HAVE_CUDA
  GTEST_SKIP() << "a build without CUDA puts no model on a GPU, whatever the profile says";
#endif
  auto file = gguf::GgufFile::open(std::string(HYPURA_GOLDEN_DIR) + "/llama-q4_k_m.gguf");
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto hp = model::read_hparams(*file);
  ASSERT_TRUE(hp.is_ok());
  auto profile = profiler::load_profile_file(std::string(HYPURA_SOURCE_DIR) +
                                             "/src/scheduler/testdata/gpu24g_ram64g.json");
  ASSERT_TRUE(profile.is_ok()) << profile.status().message();
  auto c = device_from_profile(*profile, *file, *hp, 0);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->kind, DeviceKind::kCuda);
  EXPECT_EQ(c->total_bytes, 24 * kGiB);
  EXPECT_EQ(c->gpu_bytes, profile->gpus[0].free_bytes - device_reserve_bytes(24 * kGiB));
  EXPECT_EQ(c->copy_bps, 1.0e12);
  EXPECT_NE(c->reason.find("from the profile"), std::string::npos) << c->reason;
  auto capped = device_from_profile(*profile, *file, *hp, 8 * kGiB);
  ASSERT_TRUE(capped.is_ok());
  EXPECT_EQ(capped->gpu_bytes, 8 * kGiB);
  profile->gpus.clear();
  auto cpu = device_from_profile(*profile, *file, *hp, 0);
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->kind, DeviceKind::kCpu);
}

}  // namespace
}  // namespace hypura::runtime
