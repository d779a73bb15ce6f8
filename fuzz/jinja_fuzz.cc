// libFuzzer target for the chat-template interpreter (src/tokenizer/jinja.h): the input
// is a template (GGUF metadata is untrusted), parsed and rendered over a fixed
// conversation under small RenderLimits so that every input finishes quickly. Any crash,
// sanitizer report, hang, or an OK render whose data ranges are not ascending, disjoint
// and inside the text, or whose text passes the byte cap, is a bug.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokenizer/jinja.h"

using namespace hypura::tokenizer;

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json kContext = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief. <|im_end|>"}},
        {{"role", "user"}, {"content", "  Hi <think>x</think>\n"}},
        {{"role", "assistant"}, {"content", "Hello!"}},
        {{"role", "user"}, {"content", "\xC3\xA9\xE2\x82\xAC \xFF"}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  return kContext;
}

void check(const PromptText& out, size_t max_bytes) {
  if (out.text.size() > max_bytes) std::abort();
  size_t pos = 0;
  for (const TextRange& r : out.data) {
    if (r.begin < pos || r.end <= r.begin || r.end > out.text.size()) std::abort();
    pos = r.end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = JinjaTemplate::parse(source);
  if (!tmpl.is_ok()) return 0;
  RenderOptions options;
  options.data_vars = {"messages"};
  options.limits.max_work = 4u << 20;
  options.limits.max_bytes = 1u << 20;
  options.limits.max_time = std::chrono::milliseconds(1000);
  auto out = tmpl->render(context(), options);
  if (out.is_ok()) check(*out, options.limits.max_bytes);
  return 0;
}
