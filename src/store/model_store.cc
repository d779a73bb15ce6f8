#include "store/model_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/size.h"
#include "store/json_field.h"
#include "store/model_ref.h"

namespace hypura::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kManifest = "manifest.json";
constexpr uint64_t kSpareBytes = uint64_t{64} << 20;  // left free beyond the files

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

json to_json(const StoredModel& m) {
  json files = json::array();
  for (const StoredFile& f : m.files)
    files.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  return {{"name", m.name}, {"source", m.source}, {"pulled_at", m.pulled_at}, {"files", files}};
}

Result<StoredModel> from_json(const json& j) {
  StoredModel m;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("files") ||
      !j["files"].is_array())
    return corrupt("an entry lacks its name or files");
  m.name = j["name"].get<std::string>();
  m.source = string_field(j, "source");
  m.pulled_at = integer_field(j, "pulled_at");
  for (const json& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string())
      return corrupt("a file of " + m.name + " lacks its path");
    StoredFile sf{f["path"].get<std::string>(), unsigned_field(f, "size"),
                  string_field(f, "sha256")};
    if (sf.path.empty() || sf.path[0] == '/' || sf.path.find("..") != std::string::npos)
      return corrupt("unsafe path '" + sf.path + "' in " + m.name);
    m.files.push_back(std::move(sf));
  }
  if (m.files.empty()) return corrupt(m.name + " has no files");
  return m;
}

// Bytes free for an unprivileged writer in `dir` (or its nearest existing parent).
uint64_t free_bytes(fs::path dir) {
  std::error_code ec;
  while (!dir.empty() && !fs::exists(dir, ec)) dir = dir.parent_path();
  struct statvfs st {};
  if (statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// What is still to download of a file: nothing when complete, else the part not yet here.
uint64_t missing_bytes(const std::string& dest, uint64_t size) {
  std::error_code ec;
  if (fs::exists(dest, ec) && fs::file_size(dest, ec) == size) return 0;
  const std::string part = dest + ".part";
  const uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  return have <= size ? size - have : size;
}

Status check_gguf_magic(const std::string& path, const std::string& url) {
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, 4);
  if (!in || std::string(magic, 4) != "GGUF")
    return corrupt(url + " is not a GGUF file (its first bytes are not \"GGUF\")");
  return Status::ok();
}

// The files a name means, with their URLs and destinations.
struct Planned {
  std::string name;
  std::vector<FileDownload> downloads;
  std::vector<StoredFile> files;
};

Result<Planned> plan_pull(const std::string& dir, const ModelRef& ref, const PullOptions& o) {
  Planned p;
  if (ref.kind == ModelRef::Kind::kUrl) {
    const size_t host_start = ref.url.find("://") + 3;
    const size_t path_start = ref.url.find('/', host_start);
    std::string host = ref.url.substr(host_start, path_start - host_start);
    std::replace(host.begin(), host.end(), ':', '_');
    std::string file = ref.url.substr(0, ref.url.find_first_of("?#"));
    file = file.substr(file.rfind('/') + 1);
    if (!valid_repo_segment(host) || !valid_repo_segment(file))
      return invalid_argument("cannot store " + ref.url + " under a safe file name");
    const std::string rel = "url/" + host + "/" + file;
    p.name = ref.name("");
    p.downloads.push_back({ref.url, dir + "/" + rel, 0, ""});
    p.files.push_back({rel, 0, ""});
    return p;
  }
  const std::string repo = ref.org + "/" + ref.repo;
  HYPURA_ASSIGN_OR_RETURN(
      const std::string listing,
      http_get_text(o.endpoint + "/api/models/" + repo + "/tree/main?recursive=true", o.http));
  HYPURA_ASSIGN_OR_RETURN(const std::vector<RepoFile> tree, parse_repo_tree(listing));
  std::string chosen;
  Result<std::vector<RepoFile>> picked = pick_quant(tree, ref.quant, &chosen);
  if (!picked.is_ok()) return picked.status().with_context("hf.co/" + repo);
  p.name = ref.name(chosen);
  for (const RepoFile& f : *picked) {
    const std::string rel = "hf.co/" + repo + "/" + f.path;
    p.downloads.push_back({o.endpoint + "/" + repo + "/resolve/main/" + f.path, dir + "/" + rel,
                           f.size, lower(f.sha256)});
    p.files.push_back({rel, f.size, lower(f.sha256)});
  }
  return p;
}

// Removes now-empty folders from `path`'s parent up to (not including) the store folder.
void prune_empty_dirs(const fs::path& dir, fs::path path) {
  std::error_code ec;
  for (path = path.parent_path(); path != dir && path.string().size() > dir.string().size();
       path = path.parent_path()) {
    if (!fs::is_empty(path, ec) || ec) break;
    fs::remove(path, ec);
  }
}

}  // namespace

uint64_t StoredModel::bytes() const {
  uint64_t total = 0;
  for (const StoredFile& f : files) total += f.size;
  return total;
}

Result<std::string> ModelStore::default_dir() {
  if (const char* dir = std::getenv("HYPURA_MODELS"); dir != nullptr && *dir != '\0')
    return std::string(dir);
  if (const char* data = std::getenv("XDG_DATA_HOME"); data != nullptr && *data != '\0')
    return std::string(data) + "/hypura/models";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.local/share/hypura/models";
  return not_found("no models folder: set HYPURA_MODELS (or HOME)");
}

Result<ModelStore> ModelStore::open(const std::string& dir) {
  if (!dir.empty()) return ModelStore(dir);
  HYPURA_ASSIGN_OR_RETURN(std::string d, default_dir());
  return ModelStore(std::move(d));
}

Result<std::vector<StoredModel>> ModelStore::list() const {
  const std::string path = dir_ + "/" + kManifest;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::vector<StoredModel>{};
  std::ifstream in(path);
  const json j = json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("models") || !j["models"].is_array())
    return corrupt(path + " is not a models manifest");
  std::vector<StoredModel> models;
  for (const json& e : j["models"]) {
    Result<StoredModel> m = from_json(e);
    if (!m.is_ok()) return m.status().with_context(path);
    models.push_back(*std::move(m));
  }
  return models;
}

Status ModelStore::save(const std::vector<StoredModel>& models) const {
  json list = json::array();
  for (const StoredModel& m : models) list.push_back(to_json(m));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return io_error("cannot create " + dir_ + ": " + ec.message());
  return write_file_atomically(dir_ + "/" + kManifest, json{{"models", list}}.dump(1) + "\n");
}

Result<StoredModel> ModelStore::find(std::string_view name) const {
  HYPURA_ASSIGN_OR_RETURN(const std::vector<StoredModel> models, list());
  const std::string want = lower(name);
  for (const StoredModel& m : models) {
    if (lower(m.name) == want) return m;
  }
  // hf.co/ORG/REPO without its quantization: the one pulled, if one.
  const StoredModel* only = nullptr;
  int n = 0;
  for (const StoredModel& m : models) {
    const std::string n_lower = lower(m.name);
    if (n_lower.rfind(want + ":", 0) == 0) {
      only = &m;
      ++n;
    }
  }
  if (n == 1) return *only;
  if (n > 1)
    return invalid_argument("'" + std::string(name) + "' names several pulled models; add :QUANT");
  return not_found("'" + std::string(name) + "' is not a pulled model (hypura list shows them)");
}

Result<std::string> ModelStore::path_of(std::string_view name) const {
  HYPURA_ASSIGN_OR_RETURN(const StoredModel m, find(name));
  return dir_ + "/" + m.files.front().path;
}

Result<StoredModel> ModelStore::pull(std::string_view name, const PullOptions& o,
                                     const PullProgress& progress) const {
  HYPURA_ASSIGN_OR_RETURN(const ModelRef ref, parse_model_ref(name));
  const auto report = [&](PullEvent e) {
    if (progress) progress(e);
  };
  report({"pulling manifest", "", "", 0, 0, 0, 0});
  HYPURA_ASSIGN_OR_RETURN(const Planned plan, plan_pull(dir_, ref, o));
  uint64_t need = 0;
  for (const FileDownload& d : plan.downloads) need += missing_bytes(d.dest, d.size);
  const uint64_t free = free_bytes(dir_);
  if (need > 0 && free != UINT64_MAX && need + kSpareBytes > free) {
    return resource_exhausted(plan.name + " needs " + format_size(need) + " more in " + dir_ +
                              ", which has " + format_size(free) + " free");
  }
  const int count = static_cast<int>(plan.downloads.size());
  StoredModel model{plan.name, plan.downloads.front().url, plan.files, 0};
  for (int i = 0; i < count; ++i) {
    const FileDownload& d = plan.downloads[static_cast<size_t>(i)];
    std::error_code ec;
    fs::create_directories(fs::path(d.dest).parent_path(), ec);
    if (ec) return io_error("cannot create the folder of " + d.dest + ": " + ec.message());
    const std::string file = fs::path(d.dest).filename().string();
    const std::string digest = d.sha256.empty() ? "" : "sha256:" + d.sha256;
    report({"pulling " + file, file, digest, i + 1, count, 0, d.size});
    HYPURA_RETURN_IF_ERROR(download_file(d, o.http, [&](uint64_t done, uint64_t total) {
      report({"pulling " + file, file, digest, i + 1, count, done, total});
    }));
    model.files[static_cast<size_t>(i)].size = fs::file_size(d.dest, ec);
  }
  report({"verifying sha256 digest", "", "", 0, 0, 0, 0});
  const Status magic = check_gguf_magic(plan.downloads.front().dest, plan.downloads.front().url);
  if (!magic.is_ok()) {
    std::error_code ec;
    for (const FileDownload& d : plan.downloads) fs::remove(d.dest, ec);
    return magic;
  }
  model.pulled_at = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  HYPURA_ASSIGN_OR_RETURN(std::vector<StoredModel> models, list());
  std::erase_if(models, [&](const StoredModel& m) { return lower(m.name) == lower(model.name); });
  models.push_back(model);
  HYPURA_RETURN_IF_ERROR(save(models));
  report({"success", "", "", 0, 0, 0, 0});
  return model;
}

Status ModelStore::remove(std::string_view name) const {
  HYPURA_ASSIGN_OR_RETURN(const StoredModel model, find(name));
  HYPURA_ASSIGN_OR_RETURN(std::vector<StoredModel> models, list());
  std::erase_if(models, [&](const StoredModel& m) { return m.name == model.name; });
  HYPURA_RETURN_IF_ERROR(save(models));
  for (const StoredFile& f : model.files) {
    // A file another pulled model also lists (the same URL pulled under two names) stays.
    const bool shared = std::any_of(models.begin(), models.end(), [&](const StoredModel& m) {
      return std::any_of(m.files.begin(), m.files.end(),
                         [&](const StoredFile& g) { return g.path == f.path; });
    });
    if (shared) continue;
    const fs::path path = fs::path(dir_) / f.path;
    std::error_code ec;
    fs::remove(path, ec);
    fs::remove(path.string() + ".part", ec);
    prune_empty_dirs(dir_, path);
  }
  return Status::ok();
}

}  // namespace hypura::store
