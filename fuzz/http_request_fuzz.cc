// libFuzzer target for the server's request parsing (src/server/api_request.h) and the
// pure steps that follow it: Go-template rendering, context-fit checks, response bodies;
// and what `hypura pull` reads from the network or the user (src/store/model_ref.h): model
// names, the Hub's tree listings and the file choice made from them.
// The first input byte picks the API; the rest is the request body. Any crash, sanitizer
// report, or an OK parse whose fields break the documented ranges is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/api_request.h"
#include "server/api_response.h"
#include "server/prompt.h"
#include "store/model_ref.h"

using namespace hypura::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Api api = static_cast<Api>(data[0] % 4);
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)parse_show_request(body);
  (void)parse_pull_request(body);
  (void)hypura::store::parse_model_ref(body);
  (void)hypura::store::quant_of(body);
  auto tree = hypura::store::parse_repo_tree(body);
  if (tree.is_ok()) {
    for (const auto& f : *tree) {
      if (f.path.empty() || f.path[0] == '/' || f.path.find("..") != std::string::npos)
        std::abort();
    }
    std::string chosen;
    (void)hypura::store::pick_quant(*tree, data[0] % 2 ? "" : "Q8_0", &chosen);
  }
  (void)render_prompt_template(body, TemplateVars{"sys", "prompt", ""});
  for (Api embed_api : {Api::kOllamaEmbed, Api::kOllamaEmbeddings, Api::kOpenAiEmbeddings}) {
    auto e = parse_embed_request(embed_api, body);
    if (e.is_ok()) (void)embed_body(*e, {{0.5f, 0.5f}}, 1, 0, 0);
  }
  auto request = parse_generation_request(api, body);
  if (!request.is_ok()) return 0;
  const GenerationRequest& r = *request;
  if (r.model.empty() || r.sampling.temperature < 0 || r.sampling.top_p < 0 ||
      r.sampling.top_p > 1 || r.sampling.top_k < 0 || r.num_predict < -1 || r.num_ctx < 0) {
    std::abort();
  }
  for (const auto& m : r.messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") std::abort();
  }
  auto options = generate_options(r, static_cast<int64_t>(r.prompt.size() % 300), 256, 1);
  if (options.is_ok() && options->max_tokens < 0) std::abort();
  ResponseFormatter fmt(api, r.model, r.include_usage, "id", 0);
  Outcome outcome;
  (void)fmt.stream_piece(r.prompt);
  (void)fmt.full(r.prompt, outcome);
  (void)fmt.stream_end(outcome);
  return 0;
}
