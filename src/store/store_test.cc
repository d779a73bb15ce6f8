// `hypura pull` against a real HTTP server on loopback that serves the Hub's routes
// (testing/fake_hub.h) and the faults a download meets: a dropped connection mid-file, a
// wrong hash, a 404, a gated 401.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/model_ref.h"
#include "store/model_store.h"
#include "store/testing/fake_hub.h"

namespace hypura::store {
namespace {

namespace fs = std::filesystem;

TEST(ModelRef, ParsesTheNamesPullAccepts) {
  Result<ModelRef> r = parse_model_ref("hf.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:q4_k_m");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->org, "Qwen");
  EXPECT_EQ(r->repo, "Qwen2.5-Coder-0.5B-Instruct-GGUF");
  EXPECT_EQ(r->quant, "Q4_K_M");
  EXPECT_EQ(r->name("Q4_K_M"), "hf.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M");
  r = parse_model_ref("huggingface.co/org/repo");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->quant, "");
  r = parse_model_ref("https://mirror.lan:8080/models/x.gguf?download=1");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->kind, ModelRef::Kind::kUrl);
  for (const char* bad :
       {"llama3", "hf.co/org", "hf.co/org/repo/extra", "hf.co/../x", "hf.co/org/repo:notaquant",
        "https://host/model.bin", "ftp://h/x.gguf", "hf.co/org/re po"}) {
    EXPECT_FALSE(parse_model_ref(bad).is_ok()) << bad;
  }
  EXPECT_EQ(quant_of("Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(quant_of("dir/model.iq3_xxs.gguf"), "IQ3_XXS");
  EXPECT_EQ(quant_of("gpt-oss-20b-mxfp4.gguf"), "MXFP4");
  EXPECT_EQ(quant_of("big-Q8_0-00002-of-00003.gguf"), "Q8_0");
  EXPECT_EQ(quant_of("ggml-model-f16.gguf"), "F16");
  EXPECT_EQ(quant_of("README.gguf"), "");
}

TEST(ModelRef, PicksTheQuantizationAndEverySplitPart) {
  const std::vector<RepoFile> files = {{"m-Q8_0-00002-of-00002.gguf", 2, ""},
                                       {"m-Q8_0-00001-of-00002.gguf", 1, ""},
                                       {"m-Q4_K_M.gguf", 3, ""},
                                       {"mmproj-m-F16.gguf", 4, ""},
                                       {"README.md", 5, ""},
                                       {"sub/m-IQ2_XS.gguf", 6, ""}};
  std::string chosen;
  Result<std::vector<RepoFile>> p = pick_quant(files, "", &chosen);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(chosen, "Q4_K_M");
  ASSERT_EQ(p->size(), 1u);
  p = pick_quant(files, "Q8_0", &chosen);
  ASSERT_TRUE(p.is_ok());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].path, "m-Q8_0-00001-of-00002.gguf");
  p = pick_quant(files, "Q6_K", &chosen);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("IQ2_XS, Q4_K_M, Q8_0"), std::string::npos)
      << p.status().message();
  EXPECT_EQ(p.status().message().find("F16"), std::string::npos);  // the projector is not one
  const std::vector<RepoFile> gap = {{"m-Q8_0-00001-of-00003.gguf", 1, ""},
                                     {"m-Q8_0-00003-of-00003.gguf", 1, ""}};
  EXPECT_FALSE(pick_quant(gap, "Q8_0", &chosen).is_ok());
}

TEST(ModelRef, TreeListingWithFieldsOfTheWrongTypeIsNotACrash) {
  // Found by http_request_fuzz: a later duplicate "type" key holding a number.
  Result<std::vector<RepoFile>> tree = parse_repo_tree(
      R"([{"type":"file","path":"a-Q8_0.gguf","type":5,"size":1},)"
      R"({"type":"file","path":"b-Q4_K_M.gguf","size":2,"lfs":{"oid":7,"size":"x"}}])");
  ASSERT_TRUE(tree.is_ok()) << tree.status().message();
  ASSERT_EQ(tree->size(), 1u);  // an entry whose type is not "file" is skipped
  EXPECT_EQ((*tree)[0].path, "b-Q4_K_M.gguf");
  EXPECT_EQ((*tree)[0].size, 2u);  // the malformed lfs fields are ignored
  EXPECT_EQ((*tree)[0].sha256, "");
  EXPECT_FALSE(parse_repo_tree(R"([{"type":"file","path":3,"size":1}])").is_ok());
}

class PullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) /
            ("hypura-store-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.endpoint = hub_.endpoint();
    options_.http.retry_delay_ms = 10;
    options_.http.timeout_s = 5;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  testing::FakeHub hub_;
  std::string dir_;
  PullOptions options_;
};

TEST_F(PullTest, PullsTheDefaultQuantizationVerifiedAndListed) {
  ModelStore store(dir_);
  std::vector<std::string> statuses;
  uint64_t last_done = 0;
  Result<StoredModel> m = store.pull("hf.co/org/repo", options_, [&](const PullEvent& e) {
    if (statuses.empty() || statuses.back() != e.status) statuses.push_back(e.status);
    if (e.total > 0) last_done = e.completed;
  });
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, "hf.co/org/repo:Q4_K_M");
  const std::vector<std::string> want = {"pulling manifest", "pulling m-Q4_K_M.gguf",
                                         "verifying sha256 digest", "success"};
  EXPECT_EQ(statuses, want);
  EXPECT_EQ(last_done, hub_.files_["m-Q4_K_M.gguf"].size());
  Result<std::string> path = store.path_of("HF.CO/org/repo");  // any case, no quant
  ASSERT_TRUE(path.is_ok()) << path.status().message();
  EXPECT_EQ(read(*path), hub_.files_["m-Q4_K_M.gguf"]);
  Result<std::vector<StoredModel>> listed = store.list();
  ASSERT_TRUE(listed.is_ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].files[0].sha256, hub_.shas_["m-Q4_K_M.gguf"]);
  EXPECT_EQ(hub_.token_at_cdn_, 0);
  // Again: the file is complete, nothing is downloaded.
  const int gets = hub_.cdn_gets_;
  ASSERT_TRUE(store.pull("hf.co/org/repo:Q4_K_M", options_, nullptr).is_ok());
  EXPECT_EQ(hub_.cdn_gets_, gets);
}

TEST_F(PullTest, SplitFileInPartsOpensAtTheFirst) {
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/repo:q8_0", options_, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_EQ(m->files.size(), 2u);
  Result<std::string> path = store.path_of("hf.co/org/repo:Q8_0");
  ASSERT_TRUE(path.is_ok());
  EXPECT_EQ(fs::path(*path).filename(), "m-Q8_0-00001-of-00002.gguf");
  EXPECT_EQ(read(dir_ + "/" + m->files[1].path), hub_.files_["m-Q8_0-00002-of-00002.gguf"]);
}

TEST_F(PullTest, DroppedConnectionResumesWithARange) {
  hub_.drops_left_ = 2;
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/repo", options_, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_GE(hub_.range_gets_, 1);
  EXPECT_EQ(read(*store.path_of("hf.co/org/repo")), hub_.files_["m-Q4_K_M.gguf"]);
  // Dropped more often than the attempts allow: an error that says how to resume, and the
  // part kept for it.
  hub_.drops_left_ = 100;
  options_.http.attempts = 2;
  Result<StoredModel> again = store.pull("hf.co/org/repo:Q8_0", options_, nullptr);
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("run the pull again to resume"), std::string::npos)
      << again.status().message();
  EXPECT_TRUE(fs::exists(dir_ + "/hf.co/org/repo/m-Q8_0-00001-of-00002.gguf.part"));
}

TEST_F(PullTest, InterruptedPullContinuesFromItsPart) {
  const std::string& bytes = hub_.files_["m-Q4_K_M.gguf"];
  fs::create_directories(dir_ + "/hf.co/org/repo");
  std::ofstream(dir_ + "/hf.co/org/repo/m-Q4_K_M.gguf.part", std::ios::binary)
      << bytes.substr(0, 1000000);
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/repo", options_, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(hub_.range_seen(), "bytes=1000000-");
  EXPECT_EQ(read(dir_ + "/hf.co/org/repo/m-Q4_K_M.gguf"), bytes);
  EXPECT_FALSE(fs::exists(dir_ + "/hf.co/org/repo/m-Q4_K_M.gguf.part"));
}

TEST_F(PullTest, WrongHashDeletesThePartAndSaysSo) {
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/badhash", options_, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(m.status().message().find("SHA-256"), std::string::npos) << m.status().message();
  EXPECT_FALSE(fs::exists(dir_ + "/hf.co/org/badhash/m-Q4_K_M.gguf.part"));
  EXPECT_FALSE(fs::exists(dir_ + "/hf.co/org/badhash/m-Q4_K_M.gguf"));
  EXPECT_TRUE(store.list()->empty());
}

TEST_F(PullTest, ErrorsNameTheCause) {
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/missing", options_, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  m = store.pull("hf.co/org/gated", options_, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("HF_TOKEN"), std::string::npos) << m.status().message();
  m = store.pull("hf.co/org/repo:Q6_K", options_, nullptr);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("Q4_0, Q4_K_M, Q8_0"), std::string::npos)
      << m.status().message();
  m = store.pull("hf.co/org/huge", options_, nullptr);  // more than the disk has
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().message();
  m = store.pull("hf.co/org/repo:Q4_0", options_, nullptr);  // a file that is not GGUF
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("not a GGUF file"), std::string::npos);
  EXPECT_TRUE(store.list()->empty());
}

TEST_F(PullTest, GatedRepositoryWithAToken) {
  options_.http.token = "secret";
  ModelStore store(dir_);
  Result<StoredModel> m = store.pull("hf.co/org/gated", options_, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_GE(hub_.authorized_, 1);
  EXPECT_EQ(hub_.token_at_cdn_, 0);  // the CDN host never saw it
}

TEST_F(PullTest, PlainUrlAndRemoval) {
  ModelStore store(dir_);
  const std::string url = hub_.endpoint() + "/cdn/m-Q4_K_M.gguf";
  Result<StoredModel> m = store.pull(url, options_, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->name, url);
  ASSERT_TRUE(store.pull("hf.co/org/repo:Q8_0", options_, nullptr).is_ok());
  EXPECT_EQ(store.list()->size(), 2u);
  ASSERT_TRUE(store.remove(url).is_ok());
  EXPECT_FALSE(fs::exists(dir_ + "/url"));  // emptied folders go too
  EXPECT_EQ(store.list()->size(), 1u);
  EXPECT_EQ(store.remove(url).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store.remove("hf.co/org/repo").is_ok());
  EXPECT_FALSE(fs::exists(dir_ + "/hf.co"));
  EXPECT_TRUE(store.list()->empty());
}

}  // namespace
}  // namespace hypura::store
