#include "store/model_ref.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "store/json_field.h"

namespace hypura::store {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && upper(s.substr(0, prefix.size())) == upper(prefix);
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && upper(s.substr(s.size() - suffix.size())) == upper(suffix);
}

// Q4_K_M, IQ3_XXS, Q8_0, TQ1_0, F16, BF16, F32, MXFP4, MXFP4_MOE.
bool is_quant_token(const std::string& t) {
  if (t == "F16" || t == "F32" || t == "BF16" || t == "MXFP4" || t == "MXFP4_MOE") return true;
  size_t i = 0;
  if (t.compare(0, 2, "IQ") == 0 || t.compare(0, 2, "TQ") == 0) {
    i = 2;
  } else if (!t.empty() && t[0] == 'Q') {
    i = 1;
  } else {
    return false;
  }
  if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return false;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  // Then groups of _[A-Z0-9]+ (K, M, XS, 0, 1, ...).
  while (i < t.size()) {
    if (t[i] != '_' || i + 1 >= t.size()) return false;
    ++i;
    const size_t start = i;
    while (i < t.size() && std::isalnum(static_cast<unsigned char>(t[i]))) ++i;
    if (i == start) return false;
  }
  return true;
}

// A split file's part: NAME-00002-of-00005.gguf gives base NAME, part 2 of 5.
struct SplitPart {
  std::string base;
  int part = 0, of = 0;  // 0: not split
};

SplitPart split_part(const std::string& path) {
  SplitPart s{path, 0, 0};
  constexpr std::string_view kSuffix = ".gguf";
  // "-00001-of-00005" is 15 characters before the suffix.
  if (path.size() < 15 + kSuffix.size()) return s;
  const std::string tail = path.substr(path.size() - kSuffix.size() - 15, 15);
  const auto digits = [](std::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5)) ||
      !digits(tail.substr(10, 5)))
    return s;
  s.base = path.substr(0, path.size() - kSuffix.size() - 15);
  s.part = std::stoi(tail.substr(1, 5));
  s.of = std::stoi(tail.substr(10, 5));
  return s;
}

std::string base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// The default quantization: the first of these the repository has.
constexpr const char* kDefaultQuants[] = {"Q4_K_M", "Q4_K_S", "IQ4_XS", "Q4_0", "Q5_K_M",
                                          "Q8_0",   "MXFP4",  "BF16",   "F16"};

}  // namespace

std::string ModelRef::name(const std::string& chosen_quant) const {
  if (kind == Kind::kUrl) return url;
  return "hf.co/" + org + "/" + repo + ":" + chosen_quant;
}

bool valid_repo_segment(std::string_view s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

Result<ModelRef> parse_model_ref(std::string_view text) {
  ModelRef ref;
  if (starts_with_ci(text, "https://") || starts_with_ci(text, "http://")) {
    const size_t query = text.find_first_of("?#");
    const std::string_view path = text.substr(0, query);
    const size_t host_end = path.find('/', path.find("//") + 2);
    if (host_end == std::string_view::npos || !ends_with_ci(path, ".gguf") ||
        path.find_first_of(" \t\r\n") != std::string_view::npos)
      return invalid_argument("'" + std::string(text) +
                              "': a URL must name a .gguf file (https://HOST/PATH.gguf)");
    ref.kind = ModelRef::Kind::kUrl;
    ref.url = std::string(text);
    return ref;
  }
  std::string_view rest;
  for (std::string_view host : {"hf.co/", "huggingface.co/"}) {
    if (starts_with_ci(text, host)) rest = text.substr(host.size());
  }
  if (rest.empty()) {
    return invalid_argument("'" + std::string(text) +
                            "' is not a model to pull: give hf.co/ORG/REPO[:QUANT] (e.g. "
                            "hf.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M) or the "
                            "https:// URL of a .gguf file");
  }
  const size_t colon = rest.find(':');
  const std::string_view repo_part = rest.substr(0, colon);
  if (colon != std::string_view::npos) {
    ref.quant = upper(rest.substr(colon + 1));
    if (!is_quant_token(ref.quant))
      return invalid_argument("'" + std::string(rest.substr(colon + 1)) +
                              "' is not a quantization (e.g. Q4_K_M, Q8_0, IQ3_XS, F16)");
  }
  const size_t slash = repo_part.find('/');
  if (slash == std::string_view::npos || repo_part.find('/', slash + 1) != std::string_view::npos)
    return invalid_argument("'" + std::string(text) + "': expected hf.co/ORG/REPO[:QUANT]");
  ref.org = std::string(repo_part.substr(0, slash));
  ref.repo = std::string(repo_part.substr(slash + 1));
  if (!valid_repo_segment(ref.org) || !valid_repo_segment(ref.repo))
    return invalid_argument("'" + std::string(repo_part) +
                            "' is not a repository name (letters, digits, '-', '_', '.')");
  return ref;
}

Result<std::vector<RepoFile>> parse_repo_tree(std::string_view json) {
  const nlohmann::json tree = nlohmann::json::parse(json, nullptr, false);
  if (!tree.is_array()) return corrupt("the repository listing is not a JSON array");
  std::vector<RepoFile> files;
  for (const nlohmann::json& e : tree) {
    if (!e.is_object() || string_field(e, "type") != "file") continue;
    RepoFile f;
    const auto path = e.find("path");
    const auto size = e.find("size");
    if (path == e.end() || !path->is_string() || size == e.end() || !size->is_number_unsigned())
      return corrupt("a repository listing entry lacks a path or size");
    f.path = path->get<std::string>();
    f.size = size->get<uint64_t>();
    const auto lfs = e.find("lfs");
    if (lfs != e.end() && lfs->is_object()) {
      f.sha256 = string_field(*lfs, "oid");
      if (const uint64_t lfs_size = unsigned_field(*lfs, "size")) f.size = lfs_size;
    }
    if (f.path.empty() || f.path.find("..") != std::string::npos || f.path[0] == '/')
      return corrupt("the repository listing names an unsafe path '" + f.path + "'");
    files.push_back(std::move(f));
  }
  return files;
}

std::string quant_of(std::string_view file_name) {
  std::string stem = base_name(file_name);
  if (ends_with_ci(stem, ".gguf")) stem.resize(stem.size() - 5);
  const SplitPart sp = split_part(stem + ".gguf");
  if (sp.of > 0) stem = sp.base;
  std::string found;
  size_t start = 0;
  for (size_t i = 0; i <= stem.size(); ++i) {
    if (i == stem.size() || stem[i] == '-' || stem[i] == '.') {
      const std::string token = upper(std::string_view(stem).substr(start, i - start));
      if (is_quant_token(token)) found = token;
      start = i + 1;
    }
  }
  return found;
}

Result<std::vector<RepoFile>> pick_quant(const std::vector<RepoFile>& files,
                                         const std::string& quant, std::string* chosen) {
  // Quantization -> the GGUF files (or split parts) of the first model that has it.
  std::map<std::string, std::vector<RepoFile>> by_quant;
  std::vector<RepoFile> sorted = files;
  std::sort(sorted.begin(), sorted.end(),
            [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  for (const RepoFile& f : sorted) {
    const std::string name = base_name(f.path);
    if (!ends_with_ci(name, ".gguf") || upper(name).find("MMPROJ") != std::string::npos) continue;
    const std::string q = quant_of(name);
    if (q.empty()) continue;
    std::vector<RepoFile>& group = by_quant[q];
    const SplitPart sp = split_part(f.path);
    if (group.empty()) {
      group.push_back(f);
    } else if (sp.of > 0 && split_part(group.front().path).base == sp.base) {
      group.push_back(f);  // another part of the same split file
    }
  }
  std::string want = quant;
  if (want.empty()) {
    for (const char* q : kDefaultQuants) {
      if (by_quant.count(q) > 0) {
        want = q;
        break;
      }
    }
    if (want.empty() && by_quant.size() == 1) want = by_quant.begin()->first;
  }
  const auto it = by_quant.find(want);
  if (it == by_quant.end()) {
    if (by_quant.empty()) return not_found("the repository has no GGUF files");
    std::string have;
    for (const auto& [q, group] : by_quant) have += (have.empty() ? "" : ", ") + q;
    return not_found(
        (want.empty() ? std::string("no default quantization") : "no " + want + " file") +
        " in the repository; it has: " + have + " (pull NAME:QUANT)");
  }
  std::vector<RepoFile> group = it->second;
  const SplitPart first = split_part(group.front().path);
  if (first.of > 0) {
    std::sort(group.begin(), group.end(), [](const RepoFile& a, const RepoFile& b) {
      return split_part(a.path).part < split_part(b.path).part;
    });
    for (size_t i = 0; i < group.size(); ++i) {
      const SplitPart sp = split_part(group[i].path);
      if (sp.part != static_cast<int>(i) + 1 || sp.of != first.of)
        return corrupt("the split file " + first.base + " is missing part " +
                       std::to_string(i + 1) + " of " + std::to_string(first.of));
    }
    if (static_cast<int>(group.size()) != first.of)
      return corrupt("the split file " + first.base + " has " + std::to_string(group.size()) +
                     " of its " + std::to_string(first.of) + " parts");
  }
  *chosen = want;
  return group;
}

}  // namespace hypura::store
