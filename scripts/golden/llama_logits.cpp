// Reference logits from llama.cpp for the golden tests (docs/FIDELITY.md, "Synth goldens").
//
// Loads a GGUF with llama.cpp's CPU defaults (n_ctx 512, n_batch = n_ubatch 512, 2 threads,
// no GPU layers, weight repacking on) and evaluates token id sequences, each as one
// llama_decode from an empty cache with logits at every position. Two runs:
//   default: KV cache F16, flash attention "auto"      -> PREFIX.NAME.logits.f32
//   exact:   KV cache F32, flash attention off          -> PREFIX.NAME.kvf32_fa_off.logits.f32
// Logits files are raw little-endian float32, row-major [n_tokens, n_vocab].
// With --greedy NAME it also continues that sequence greedily (argmax, lowest id on a tie)
// for 16 ids, one token per decode, and prints the ids and each step's top-1 margin.
// Prints one JSON object on stdout.
//
// Build: scripts/golden/build_llama_logits.sh (links the libllama of a llama.cpp build).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "llama.h"

namespace {

struct Args {
  std::string model;
  std::string prefix;
  bool exact = false;
  std::string greedy;
  std::vector<std::pair<std::string, std::vector<llama_token>>> seqs;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "llama_logits: %s\n", msg.c_str());
  std::exit(1);
}

std::vector<llama_token> parse_ids(const std::string& list) {
  std::vector<llama_token> ids;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    ids.push_back(static_cast<llama_token>(std::stol(list.substr(pos, comma - pos))));
    pos = comma + 1;
  }
  if (ids.empty()) die("empty sequence");
  return ids;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") {
      a.model = value();
    } else if (k == "--prefix") {
      a.prefix = value();
    } else if (k == "--exact") {
      a.exact = true;
    } else if (k == "--greedy") {
      a.greedy = value();
    } else if (k == "--seq") {
      std::string s = value();
      size_t eq = s.find('=');
      if (eq == std::string::npos) die("--seq wants NAME=id,id,...");
      a.seqs.emplace_back(s.substr(0, eq), parse_ids(s.substr(eq + 1)));
    } else {
      die("unknown argument " + k +
          " (usage: --model F --prefix P [--exact] [--greedy NAME] --seq NAME=ids...)");
    }
  }
  if (a.model.empty() || a.prefix.empty() || a.seqs.empty()) die("need --model, --prefix, --seq");
  return a;
}

// llama.cpp's log lines that say how flash attention and the weight buffers were resolved.
std::string g_log_notes;
void log_filter(ggml_log_level, const char* text, void*) {
  if (std::strstr(text, "flash_attn") || std::strstr(text, "REPACK") ||
      std::strstr(text, "type_k")) {
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    for (char& c : line) {
      if (c == '"' || c == '\\') c = '\'';
    }
    g_log_notes += (g_log_notes.empty() ? "\"" : ", \"") + line + "\"";
  }
}

// Decodes `ids` at positions [pos0, pos0 + n) of sequence 0, logits for every row.
void decode(llama_context* ctx, const llama_token* ids, int n, int pos0) {
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = ids[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc != 0) die("llama_decode returned " + std::to_string(rc));
}

void top2(const float* row, int n, int* best, float* margin) {
  int b = 0;
  for (int i = 1; i < n; ++i) {
    if (row[i] > row[b]) b = i;  // strict: the lowest id wins a tie
  }
  float second = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (i != b && row[i] > second) second = row[i];
  }
  *best = b;
  *margin = row[b] - second;
}

void write_rows(llama_context* ctx, int n_rows, int n_vocab, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) die("cannot write " + path);
  for (int i = 0; i < n_rows; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    if (!row) die("no logits for row " + std::to_string(i));
    if (std::fwrite(row, sizeof(float), n_vocab, f) != static_cast<size_t>(n_vocab)) {
      die("short write to " + path);
    }
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  llama_log_set(log_filter, nullptr);
  llama_backend_init();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(a.model.c_str(), mp);
  if (!model) die("cannot load " + a.model);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  if (a.exact) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }  // else llama.cpp's defaults: F16 KV, flash attention auto
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");

  std::printf("{\n  \"n_vocab\": %d,\n  \"files\": {", n_vocab);
  const char* suffix = a.exact ? ".kvf32_fa_off.logits.f32" : ".logits.f32";
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    const auto& [name, ids] = a.seqs[s];
    llama_memory_clear(llama_get_memory(ctx), true);
    decode(ctx, ids.data(), static_cast<int>(ids.size()), 0);
    const std::string path = a.prefix + "." + name + suffix;
    write_rows(ctx, static_cast<int>(ids.size()), n_vocab, path);
    std::printf("%s\"%s\": \"%s\"", s ? ", " : "", name.c_str(), path.c_str());
  }
  std::printf("}");

  if (!a.greedy.empty()) {
    std::vector<llama_token> ids;
    for (const auto& [name, seq] : a.seqs) {
      if (name == a.greedy) ids = seq;
    }
    if (ids.empty()) die("--greedy names no --seq");
    llama_memory_clear(llama_get_memory(ctx), true);
    decode(ctx, ids.data(), static_cast<int>(ids.size()), 0);
    const float* row = llama_get_logits_ith(ctx, static_cast<int>(ids.size()) - 1);
    std::string out_ids, out_margins;
    for (int step = 0; step < 16; ++step) {
      int best = 0;
      float margin = 0;
      top2(row, n_vocab, &best, &margin);
      out_ids += (step ? ", " : "") + std::to_string(best);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.6g", step ? ", " : "", margin);
      out_margins += buf;
      if (step == 15) break;
      const llama_token next = best;
      decode(ctx, &next, 1, static_cast<int>(ids.size()) + step);
      row = llama_get_logits_ith(ctx, 0);
    }
    std::printf(",\n  \"greedy\": [%s],\n  \"greedy_top1_margins\": [%s]", out_ids.c_str(),
                out_margins.c_str());
  }
  std::printf(",\n  \"log\": [%s]\n}\n", g_log_notes.c_str());

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
