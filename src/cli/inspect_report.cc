// Builds and renders the `hypura inspect` report (see inspect_report.h).
#include "cli/inspect_report.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "common/size.h"
#include "model/tensor_role.h"

namespace hypura::cli {
namespace {

using gguf::GgufFile;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;
using model::TensorRole;

// Arrays longer than this are summarised in text and default JSON output.
constexpr size_t kMaxArrayShown = 32;
constexpr size_t kMaxStringShown = 72;

std::optional<uint64_t> arch_u64(const gguf::Metadata& md, const std::string& arch,
                                 const char* key) {
  if (arch.empty()) return std::nullopt;
  return md.get_u64(arch + "." + key);
}

void add_to_layer(LayerBytes& row, TensorRole role, uint64_t n) {
  if (model::is_norm(role)) {
    row.norms += n;
  } else if (model::is_attention(role)) {
    row.attention += n;
  } else if (model::is_dense_ffn(role)) {
    row.ffn += n;
  } else if (model::is_moe_expert(role)) {
    row.experts += n;
  } else if (role == TensorRole::kSharedExpert) {
    row.shared_expert += n;
  } else if (role == TensorRole::kMoeRouter) {
    row.router += n;
  } else {
    row.other += n;
  }
}

void fill_hparams(InspectReport& r, const GgufFile& file) {
  const gguf::Metadata& md = file.metadata();
  const std::string& a = r.architecture;
  r.context_length = arch_u64(md, a, "context_length");
  r.n_embd = arch_u64(md, a, "embedding_length");
  r.n_layer = arch_u64(md, a, "block_count");
  r.n_ff = arch_u64(md, a, "feed_forward_length");
  r.n_ff_expert = arch_u64(md, a, "expert_feed_forward_length");
  r.n_head = arch_u64(md, a, "attention.head_count");
  r.n_head_kv = arch_u64(md, a, "attention.head_count_kv");
  r.n_expert = arch_u64(md, a, "expert_count");
  r.n_expert_used = arch_u64(md, a, "expert_used_count");
  r.n_vocab = arch_u64(md, a, "vocab_size");
  if (!r.n_vocab) {
    if (const auto* tokens = md.get_array("tokenizer.ggml.tokens")) r.n_vocab = tokens->size();
  }
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// One metadata value on one line of text.
std::string value_to_text(const Value& v) {
  if (const auto* s = v.as_string()) {
    std::string shown = s->size() > kMaxStringShown ? s->substr(0, kMaxStringShown) + "..." : *s;
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    std::string out = "\"" + shown + "\"";
    if (s->size() > kMaxStringShown) out += " (" + std::to_string(s->size()) + " chars)";
    return out;
  }
  if (const auto* a = v.as_array()) {
    return std::string("[") + std::to_string(a->size()) + " x " +
           gguf::value_type_name(v.array_type) + "]";
  }
  return value_to_json(v, kMaxArrayShown).dump();
}

// Text from the file, safe for a terminal: control bytes (escape sequences) become '?'.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out;
}

std::string opt(const std::optional<uint64_t>& v) {
  return v ? std::to_string(*v) : "?";
}

void print_totals_table(std::ostream& out, const std::map<std::string, TensorTotals>& rows,
                        const char* first_column, uint64_t total_bytes) {
  char line[160];
  std::snprintf(line, sizeof(line), "  %-18s %8s %16s %12s %7s\n", first_column, "tensors",
                "params", "bytes", "share");
  out << line;
  for (const auto& [key, t] : rows) {
    double share = total_bytes ? 100.0 * static_cast<double>(t.n_bytes) / total_bytes : 0.0;
    std::snprintf(line, sizeof(line), "  %-18s %8" PRIu64 " %16s %12s %6.1f%%\n", key.c_str(),
                  t.n_tensors, with_commas(t.n_params).c_str(), format_size(t.n_bytes).c_str(),
                  share);
    out << line;
  }
}

void print_layer_table(std::ostream& out, const InspectReport& r) {
  char line[200];
  std::snprintf(line, sizeof(line), "  %-6s %11s %11s %11s %11s %11s %11s %11s %11s\n", "layer",
                "attention", "ffn", "experts", "shared", "router", "norms", "other", "total");
  out << line;
  auto cell = [](uint64_t n) { return n ? format_size(n) : std::string("-"); };
  for (const LayerBytes& l : r.layers) {
    std::snprintf(line, sizeof(line), "  %-6d %11s %11s %11s %11s %11s %11s %11s %11s\n", l.layer,
                  cell(l.attention).c_str(), cell(l.ffn).c_str(), cell(l.experts).c_str(),
                  cell(l.shared_expert).c_str(), cell(l.router).c_str(), cell(l.norms).c_str(),
                  cell(l.other).c_str(), cell(l.total()).c_str());
    out << line;
  }
  std::snprintf(line, sizeof(line), "  %-6s %11s  (token_embd, output, output_norm, ...)\n", "none",
                format_size(r.outside_layers.n_bytes).c_str());
  out << line;
}

}  // namespace

void TensorTotals::add(const TensorInfo& t) {
  n_tensors += 1;
  n_params += static_cast<uint64_t>(t.n_elements());
  n_bytes += t.n_bytes;
}

uint64_t LayerBytes::total() const {
  return attention + ffn + experts + shared_expert + router + norms + other;
}

InspectReport build_inspect_report(const GgufFile& file) {
  InspectReport r;
  r.files = file.paths();
  r.file_bytes = file.total_bytes();
  r.gguf_version = file.version();
  r.alignment = file.alignment();
  r.data_offset = file.data_offset();
  r.architecture = file.architecture();
  r.name = file.metadata().get_string("general.name").value_or("");
  fill_hparams(r, file);
  for (const TensorInfo& t : file.tensors()) {
    r.all.add(t);
    r.by_type[gguf::type_name(t.type)].add(t);
    model::TensorClass c = model::classify_tensor(t.name, r.architecture);
    r.by_role[model::role_name(c.role)].add(t);
    if (c.layer < 0) {
      r.outside_layers.add(t);
      continue;
    }
    // Layer numbers come from tensor names: the table grows to the largest one seen, which
    // the tensor count bounds (an absurd "blk.999999999" alone is reported as other).
    if (static_cast<size_t>(c.layer) >= r.layers.size()) {
      if (static_cast<size_t>(c.layer) > file.tensors().size()) {
        r.by_role["other"].add(t);
        continue;
      }
      size_t old = r.layers.size();
      r.layers.resize(static_cast<size_t>(c.layer) + 1);
      for (size_t i = old; i < r.layers.size(); ++i) r.layers[i].layer = static_cast<int>(i);
    }
    add_to_layer(r.layers[static_cast<size_t>(c.layer)], c.role, t.n_bytes);
  }
  return r;
}

nlohmann::ordered_json value_to_json(const Value& v, std::optional<size_t> max_array) {
  using json = nlohmann::ordered_json;
  if (const auto* a = v.as_array()) {
    if (max_array && a->size() > *max_array) return "<array of " + std::to_string(a->size()) + ">";
    json out = json::array();
    for (const Value& e : *a) out.push_back(value_to_json(e, max_array));
    return out;
  }
  // Strings may hold invalid UTF-8: dump with json::error_handler_t::replace.
  if (const auto* s = v.as_string()) return *s;
  if (auto b = v.as_bool()) return *b;
  if (v.type == ValueType::FLOAT32 || v.type == ValueType::FLOAT64) return *v.as_f64();
  if (auto u = std::get_if<uint64_t>(&v.data)) return *u;
  if (auto i = std::get_if<int64_t>(&v.data)) return *i;
  return nullptr;
}

namespace {

nlohmann::ordered_json totals_json(const TensorTotals& t) {
  return {{"tensors", t.n_tensors}, {"params", t.n_params}, {"bytes", t.n_bytes}};
}

nlohmann::ordered_json opt_json(const std::optional<uint64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json tensors_json(const GgufFile& file, const std::string& arch) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const TensorInfo& t : file.tensors()) {
    model::TensorClass c = model::classify_tensor(t.name, arch);
    out.push_back({{"name", t.name},
                   {"type", gguf::type_name(t.type)},
                   {"ne", t.ne},
                   {"file", t.file_index},
                   {"offset", t.offset},
                   {"bytes", t.n_bytes},
                   {"role", model::role_name(c.role)},
                   {"layer", c.layer}});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json report_to_json(const InspectReport& r, const GgufFile& file,
                                      const InspectOptions& options) {
  using json = nlohmann::ordered_json;
  json j;
  j["files"] = r.files;
  j["file_bytes"] = r.file_bytes;
  j["gguf_version"] = r.gguf_version;
  j["alignment"] = r.alignment;
  j["data_offset"] = r.data_offset;
  j["architecture"] = r.architecture;
  j["name"] = r.name;
  j["n_params"] = r.all.n_params;
  j["n_tensors"] = r.all.n_tensors;
  j["tensor_bytes"] = r.all.n_bytes;
  j["hparams"] = {{"context_length", opt_json(r.context_length)},
                  {"n_embd", opt_json(r.n_embd)},
                  {"n_layer", opt_json(r.n_layer)},
                  {"n_ff", opt_json(r.n_ff)},
                  {"n_ff_expert", opt_json(r.n_ff_expert)},
                  {"n_head", opt_json(r.n_head)},
                  {"n_head_kv", opt_json(r.n_head_kv)},
                  {"n_expert", opt_json(r.n_expert)},
                  {"n_expert_used", opt_json(r.n_expert_used)},
                  {"n_vocab", opt_json(r.n_vocab)}};
  j["quant_mix"] = json::object();
  for (const auto& [type, t] : r.by_type) j["quant_mix"][type] = totals_json(t);
  j["roles"] = json::object();
  for (const auto& [role, t] : r.by_role) j["roles"][role] = totals_json(t);
  j["outside_layers"] = totals_json(r.outside_layers);
  j["layers"] = json::array();
  for (const LayerBytes& l : r.layers) {
    j["layers"].push_back({{"layer", l.layer},
                           {"attention", l.attention},
                           {"ffn", l.ffn},
                           {"experts", l.experts},
                           {"shared_expert", l.shared_expert},
                           {"router", l.router},
                           {"norms", l.norms},
                           {"other", l.other},
                           {"total", l.total()}});
  }
  std::optional<size_t> max_array;
  if (!options.full_metadata) max_array = kMaxArrayShown;
  j["metadata"] = json::object();
  j["metadata_types"] = json::object();
  for (const auto& [key, value] : file.metadata().entries()) {
    j["metadata"][key] = value_to_json(value, max_array);
    std::string type = gguf::value_type_name(value.type);
    if (value.type == ValueType::ARRAY)
      type += std::string("[") + gguf::value_type_name(value.array_type) + "]";
    j["metadata_types"][key] = type;
  }
  if (options.tensors) j["tensors"] = tensors_json(file, r.architecture);
  return j;
}

std::string report_to_text(const InspectReport& r, const GgufFile& file,
                           const InspectOptions& options) {
  std::ostringstream out;
  out << "file:          " << r.files.at(0);
  if (r.files.size() > 1) out << " (+" << r.files.size() - 1 << " split files)";
  out << "\nsize:          " << format_size(r.file_bytes) << " (" << with_commas(r.file_bytes)
      << " bytes), GGUF v" << r.gguf_version << ", alignment " << r.alignment
      << ", tensor data at offset " << r.data_offset << "\n";
  out << "architecture:  " << (r.architecture.empty() ? "(none)" : printable(r.architecture));
  if (!r.name.empty()) out << "   name: " << printable(r.name);
  double bpw = r.all.n_params ? 8.0 * static_cast<double>(r.all.n_bytes) / r.all.n_params : 0.0;
  char bpw_text[32];
  std::snprintf(bpw_text, sizeof(bpw_text), "%.2f", bpw);
  out << "\nparameters:    " << with_commas(r.all.n_params) << " in " << r.all.n_tensors
      << " tensors, " << format_size(r.all.n_bytes) << " (" << bpw_text << " bits/weight)\n";
  out << "context:       " << opt(r.context_length) << "   vocabulary: " << opt(r.n_vocab) << "\n";
  out << "shape:         n_embd " << opt(r.n_embd) << ", n_layer " << opt(r.n_layer) << ", n_head "
      << opt(r.n_head) << " (kv " << opt(r.n_head_kv) << "), n_ff " << opt(r.n_ff);
  if (r.n_expert) out << ", experts " << *r.n_expert << " (" << opt(r.n_expert_used) << " used)";
  if (r.n_ff_expert) out << ", expert n_ff " << *r.n_ff_expert;
  out << "\n\nquant mix:\n";
  print_totals_table(out, r.by_type, "type", r.all.n_bytes);
  out << "\nbytes by role:\n";
  print_totals_table(out, r.by_role, "role", r.all.n_bytes);
  out << "\nbytes per layer:\n";
  print_layer_table(out, r);
  out << "\nmetadata:\n";
  for (const auto& [key, value] : file.metadata().entries()) {
    out << "  " << printable(key) << " = " << value_to_text(value) << "\n";
  }
  if (options.tensors) {
    out << "\ntensors:\n";
    char line[256];
    for (const TensorInfo& t : file.tensors()) {
      model::TensorClass c = model::classify_tensor(t.name, r.architecture);
      std::snprintf(line, sizeof(line), "  %-40s %-8s %-24s %12s  @%-12" PRIu64 " %s\n",
                    printable(t.name).c_str(), gguf::type_name(t.type), shape_string(t.ne).c_str(),
                    format_size(t.n_bytes).c_str(), t.offset, model::role_name(c.role));
      out << line;
    }
  }
  return out.str();
}

}  // namespace hypura::cli
