#include "common/cache_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace hypura {
namespace {

// Sets an environment variable for one scope (empty value: unset).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    value.empty() ? ::unsetenv(name) : ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string scratch_dir() {
  char tmpl[] = "/tmp/hypura-cache-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

TEST(CacheDir, XdgThenHome) {
  ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
  EXPECT_EQ(*cache_dir(), "/x/cache/hypura");
  ScopedEnv no_xdg("XDG_CACHE_HOME", "");
  ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(*cache_dir(), "/home/u/.cache/hypura");
}

// Issue 14: the fallback was a shared /tmp/hypura anyone could create first (and fill
// with links). It is now private to the user, and refused when it is not.
TEST(CacheDir, TempFallbackIsPrivate) {
  const std::string tmp = scratch_dir();
  ScopedEnv no_xdg("XDG_CACHE_HOME", ""), no_home("HOME", ""), tmpdir("TMPDIR", tmp);
  const std::string want = tmp + "/hypura-" + std::to_string(::geteuid());
  auto dir = cache_dir();
  ASSERT_TRUE(dir.is_ok()) << dir.status().message();
  EXPECT_EQ(*dir, want);
  struct stat st {};
  ASSERT_EQ(::lstat(want.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(cache_dir().is_ok());  // an existing private directory is reused

  ::chmod(want.c_str(), 0777);  // someone else could plant links in it
  EXPECT_FALSE(cache_dir().is_ok());
  std::filesystem::remove(want);
  std::filesystem::create_directory_symlink(tmp, want);  // a planted link
  EXPECT_FALSE(cache_dir().is_ok());
  std::filesystem::remove_all(tmp);
}

// Issue 14: tests wrote into the real ~/.cache/hypura. Under ctest (which sets
// HYPURA_SOURCE_DIR) every test gets <build>/test-cache instead.
TEST(CacheDir, TestsUseAScratchCache) {
  if (!std::getenv("HYPURA_SOURCE_DIR")) GTEST_SKIP() << "not run by ctest";
  auto dir = cache_dir();
  ASSERT_TRUE(dir.is_ok());
  EXPECT_NE(dir->find("/test-cache/"), std::string::npos) << *dir;
}

}  // namespace
}  // namespace hypura
