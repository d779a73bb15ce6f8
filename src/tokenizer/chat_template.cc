#include "tokenizer/chat_template.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "tokenizer/builtin_templates.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer {
namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Jinja's `trim` / Python's str.strip() on ASCII whitespace.
std::string trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(kSpace);
  return std::string(s.substr(b, e - b + 1));
}

// A chatml template's built-in system prompt: a string literal of the form
// '<|im_start|>system\n<text><|im_end|>' with plain text (no quotes or Jinja) inside.
std::string find_default_system(std::string_view tmpl) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t pos = tmpl.find(kOpen); pos != std::string_view::npos;
       pos = tmpl.find(kOpen, pos + 1)) {
    std::string_view rest = tmpl.substr(pos + kOpen.size());
    if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    const size_t end = rest.find(kClose);
    if (end == std::string_view::npos) continue;
    const std::string_view text = rest.substr(0, end);
    if (text.empty() || text.find_first_of("'\"{}+\\") != std::string_view::npos) continue;
    return std::string(text);
  }
  return "";
}

std::string today_for_llama3() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return buf;
}

// trim() of a text that mixes template text and data.
PromptText trim(const PromptText& p) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = p.text.find_first_not_of(kSpace);
  if (b == std::string::npos) return {};
  return p.slice(b, p.text.find_last_not_of(kSpace) + 1);
}

bool is_known_role(std::string_view role) {
  return role == "system" || role == "user" || role == "assistant";
}

// The roles callers validate are template text (they make up markers like <|user|>);
// any other role string came from outside and is data.
void append_role(PromptText& out, std::string_view role) {
  if (is_known_role(role))
    out.append_template(role);
  else
    out.append_data(role);
}

// Splits off a leading system message: returns its content (or "") and the rest.
std::string_view take_system(std::span<const ChatMessage>& m, bool* has_system) {
  *has_system = !m.empty() && m.front().role == "system";
  if (!*has_system) return {};
  std::string_view content = m.front().content;
  m = m.subspan(1);
  return content;
}

// Kept apart from the family detection: a recognised family (Qwen2.5's is chatml) is
// rendered by fixed code, but only the template itself knows how it writes tools.
std::shared_ptr<const JinjaTemplate> parse_tools_template(std::string_view t) {
  if (!contains(t, "tools") && !contains(t, "tool_calls")) return nullptr;
  auto jinja = JinjaTemplate::parse(t);
  if (!jinja.is_ok()) return nullptr;
  return std::make_shared<const JinjaTemplate>(std::move(jinja).value());
}

}  // namespace

const char* chat_family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kChatml:
      return "chatml";
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kGemma:
      return "gemma";
    case ChatFamily::kLlama2:
      return "llama2";
    case ChatFamily::kMistral:
      return "mistral";
    case ChatFamily::kPhi3:
      return "phi3";
    case ChatFamily::kZephyr:
      return "zephyr";
    case ChatFamily::kJinja:
      return "jinja";
  }
  return "?";
}

ChatTemplate ChatTemplate::from_text(std::string_view t, std::string bos_text, std::string eos_text,
                                     bool add_bos) {
  ChatTemplate ct;
  ct.bos_ = std::move(bos_text);
  ct.eos_ = std::move(eos_text);
  ct.add_bos_ = add_bos;
  if (!add_bos && contains(t, "bos_token")) ct.leading_bos_ = ct.bos_;
  if (contains(t, "<|im_start|>")) {
    ct.family_ = ChatFamily::kChatml;
    ct.default_system_ = find_default_system(t);
    ct.strip_think_ = contains(t, "</think>");
  } else if (contains(t, "<|start_header_id|>")) {
    ct.family_ = ChatFamily::kLlama3;
    ct.llama3_date_header_ = contains(t, "Cutting Knowledge Date");
    // Llama 3.1 pins the date unless the template asks for today's (3.2: strftime_now).
    if (ct.llama3_date_header_ && !contains(t, "strftime_now")) ct.date_ = "26 Jul 2024";
  } else if (contains(t, "<start_of_turn>")) {
    ct.family_ = ChatFamily::kGemma;
  } else if (contains(t, "<|user|>") && contains(t, "<|end|>")) {
    ct.family_ = ChatFamily::kPhi3;
    ct.phi3_system_ = contains(t, "<|system|>");
  } else if (contains(t, "<|user|>")) {
    ct.family_ = ChatFamily::kZephyr;
  } else if (contains(t, "[INST]")) {
    ct.family_ = contains(t, "<<SYS>>") ? ChatFamily::kLlama2 : ChatFamily::kMistral;
  } else if (auto jinja = t.empty() ? Result<JinjaTemplate>(not_found("no template"))
                                    : JinjaTemplate::parse(t);
             jinja.is_ok()) {
    ct.family_ = ChatFamily::kJinja;
    ct.jinja_ = std::make_shared<const JinjaTemplate>(std::move(jinja).value());
  } else {
    ct.family_ = ChatFamily::kChatml;
    ct.fallback_ = true;
    spdlog::warn("chat template not usable ({}); using chatml",
                 t.empty() ? "the model has none" : jinja.status().message());
  }
  ct.tools_jinja_ = parse_tools_template(t);
  return ct;
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok) {
  const std::string bos = tok.token_text(tok.bos_id());
  const std::string eos = tok.token_text(tok.eos_id());
  const bool add_bos = tok.add_bos();
  if (!tok.chat_template().empty()) return from_text(tok.chat_template(), bos, eos, add_bos);
  // No template: the vocabulary's marker tokens tell the family; these synthetic
  // template texts only carry the markers from_text looks for.
  for (std::string_view marker : {"<|im_start|>", "<|start_header_id|>", "<start_of_turn>"}) {
    if (tok.find_token(marker) >= 0) {
      return from_text(std::string(marker) + "{{ bos_token }}", bos, eos, add_bos);
    }
  }
  if (tok.find_token("<|user|>") >= 0 && tok.find_token("<|end|>") >= 0) {
    return from_text("<|user|><|end|><|system|>", bos, eos, add_bos);
  }
  // gpt-oss's harmony markers: its own template, which we carry.
  if (tok.harmony()) {
    return from_text(gpt_oss_chat_template(), bos, eos, add_bos);
  }
  return from_text("", bos, eos, add_bos);
}

Result<PromptText> ChatTemplate::render(std::span<const ChatMessage> m, bool gen,
                                        std::string_view tools, std::string_view effort) const {
  const bool tool_turns = std::any_of(m.begin(), m.end(), [](const ChatMessage& msg) {
    return msg.role == "tool" || !msg.tool_calls.empty();
  });
  if (!tools.empty() || tool_turns) return render_tools(m, gen, tools, effort);
  PromptText out;
  if (family_ != ChatFamily::kChatml && family_ != ChatFamily::kJinja)
    out.append_template(leading_bos_);
  switch (family_) {
    case ChatFamily::kChatml:
      render_chatml(m, gen, out);
      break;
    case ChatFamily::kLlama3:
      render_llama3(m, gen, out);
      break;
    case ChatFamily::kGemma:
      render_gemma(m, gen, out);
      break;
    case ChatFamily::kLlama2:
      render_llama2(m, gen, out);
      break;
    case ChatFamily::kMistral:
      render_mistral(m, gen, out);
      break;
    case ChatFamily::kPhi3:
      render_phi3(m, gen, out);
      break;
    case ChatFamily::kZephyr:
      render_zephyr(m, gen, out);
      break;
    case ChatFamily::kJinja:
      return render_jinja(m, gen, effort);
  }
  return out;
}

Result<PromptText> ChatTemplate::render_continuing(std::span<const ChatMessage> m,
                                                   std::string_view tools,
                                                   std::string_view effort) const {
  const std::string reply = trim(m.back().content);
  if (reply.empty()) return render(m.first(m.size() - 1), true, tools, effort);
  HYPURA_ASSIGN_OR_RETURN(PromptText full, render(m, false, tools, effort));
  const size_t at = full.text.rfind(reply);
  if (at == std::string::npos) {
    return invalid_argument(
        "the chat template does not write the final assistant message, so "
        "it cannot be continued");
  }
  return full.slice(0, at + reply.size());
}

Result<PromptText> ChatTemplate::render_continuation(std::span<const ChatMessage> messages,
                                                     size_t n_old, bool add_generation_prompt,
                                                     bool* prefix_ok) const {
  HYPURA_ASSIGN_OR_RETURN(PromptText full, render(messages, add_generation_prompt));
  HYPURA_ASSIGN_OR_RETURN(PromptText old,
                          render(messages.first(std::min(n_old, messages.size())), false));
  *prefix_ok = full.text.starts_with(old.text);
  return *prefix_ok ? full.slice(old.text.size()) : full;
}

std::string ChatTemplate::end_of_turn() const {
  switch (family_) {
    case ChatFamily::kChatml:
      return "<|im_end|>";
    case ChatFamily::kLlama3:
      return "<|eot_id|>";
    case ChatFamily::kGemma:
      return "<end_of_turn>";
    case ChatFamily::kPhi3:
      return "<|end|>";
    default:
      return eos_;
  }
}

// The renderers below write the template's markers with append_template and everything
// that comes from a message (role, content) with append_data.

// <|im_start|>{role}\n{content}<|im_end|>\n per message; the template's default system
// prompt first when the conversation does not start with a system message. Qwen3-style
// templates keep only the answer (after </think>) of replies before the last user turn.
void ChatTemplate::render_chatml(std::span<const ChatMessage> m, bool gen, PromptText& out) const {
  if (!default_system_.empty() && !m.empty() && m.front().role != "system") {
    out.append_template("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
  }
  size_t last_user = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "user") last_user = i;
  }
  for (size_t i = 0; i < m.size(); ++i) {
    std::string_view content = m[i].content;
    const size_t think_end = content.rfind("</think>");
    if (strip_think_ && m[i].role == "assistant" && i < last_user &&
        think_end != std::string_view::npos) {
      // Qwen3: content.split('</think>')[-1].lstrip('\n')
      content.remove_prefix(think_end + 8);
      while (content.starts_with('\n')) content.remove_prefix(1);
    }
    out.append_template("<|im_start|>");
    append_role(out, m[i].role);
    out.append_template("\n");
    out.append_data(content);
    out.append_template("<|im_end|>\n");
  }
  if (gen) out.append_template("<|im_start|>assistant\n");
}

// Llama 3.0: header + trimmed content + <|eot_id|> per message. Llama 3.1+: the system
// block always comes first, with the knowledge/today dates before the system text.
void ChatTemplate::render_llama3(std::span<const ChatMessage> m, bool gen, PromptText& out) const {
  if (llama3_date_header_) {
    bool has_system = false;
    const std::string system = trim(take_system(m, &has_system));
    out.append_template("<|start_header_id|>system<|end_header_id|>\n\n");
    out.append_template("Cutting Knowledge Date: December 2023\nToday Date: ");
    out.append_template(date_.empty() ? today_for_llama3() : date_);
    out.append_template("\n\n");
    out.append_data(system);
    out.append_template("<|eot_id|>");
  }
  for (const auto& msg : m) {
    out.append_template("<|start_header_id|>");
    append_role(out, msg.role);
    out.append_template("<|end_header_id|>\n\n");
    out.append_data(trim(msg.content));
    out.append_template("<|eot_id|>");
  }
  if (gen) out.append_template("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Gemma 3: system text + "\n\n" opens the first turn; assistant is called "model".
void ChatTemplate::render_gemma(std::span<const ChatMessage> m, bool gen, PromptText& out) const {
  bool has_system = false;
  const std::string_view system = take_system(m, &has_system);
  for (size_t i = 0; i < m.size(); ++i) {
    out.append_template("<start_of_turn>");
    if (m[i].role == "assistant")
      out.append_template("model");
    else
      append_role(out, m[i].role);
    out.append_template("\n");
    if (i == 0 && has_system) {
      out.append_data(system);
      out.append_template("\n\n");
    }
    out.append_data(trim(m[i].content));
    out.append_template("<end_of_turn>\n");
  }
  if (gen) out.append_template("<start_of_turn>model\n");
}

// Llama 2: every user turn opens with BOS; the system block sits inside the first one.
// The template has no generation prompt: "[/INST]" already hands over.
void ChatTemplate::render_llama2(std::span<const ChatMessage> m, bool /*gen*/,
                                 PromptText& out) const {
  bool has_system = false;
  const std::string_view system = take_system(m, &has_system);
  const size_t start = out.text.size();
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].role != "user" && m[i].role != "assistant") continue;
    PromptText turn;
    if (i == 0 && has_system) {
      turn.append_template("<<SYS>>\n");
      turn.append_data(system);
      turn.append_template("\n<</SYS>>\n\n");
    }
    turn.append_data(m[i].content);
    turn = trim(turn);
    if (m[i].role == "user") {
      if (out.text.size() > start) out.append_template(bos_);
      out.append_template("[INST] ");
      out.append(turn);
      out.append_template(" [/INST]");
    } else {
      out.append_template(" ");
      out.append(turn);
      out.append_template(" " + eos_);
    }
  }
}

// Mistral v0.1 style: [INST] user [/INST]assistant</s>; system joins the first user turn.
void ChatTemplate::render_mistral(std::span<const ChatMessage> m, bool /*gen*/,
                                  PromptText& out) const {
  bool has_system = false;
  const std::string_view system = take_system(m, &has_system);
  for (size_t i = 0; i < m.size(); ++i) {
    const bool known = m[i].role == "user" || m[i].role == "assistant";
    if (!known) continue;
    if (m[i].role == "user") out.append_template("[INST] ");
    if (i == 0 && has_system) {
      out.append_data(system);
      out.append_data("\n\n");
    }
    out.append_data(m[i].content);
    out.append_template(m[i].role == "user" ? " [/INST]" : eos_);
  }
}

// Phi-3: <|role|>\n{content}<|end|>\n. Phi-3-mini's template opens the assistant turn
// after every user message and ignores system messages; later ones (with <|system|>)
// render system and use add_generation_prompt.
void ChatTemplate::render_phi3(std::span<const ChatMessage> m, bool gen, PromptText& out) const {
  for (const auto& msg : m) {
    if (msg.role == "system" && phi3_system_ && !msg.content.empty()) {
      out.append_template("<|system|>\n");
      out.append_data(msg.content);
      out.append_template("<|end|>\n");
    } else if (msg.role == "user") {
      out.append_template("<|user|>\n");
      out.append_data(msg.content);
      out.append_template(phi3_system_ ? "<|end|>\n" : "<|end|>\n<|assistant|>\n");
    } else if (msg.role == "assistant") {
      if (phi3_system_) out.append_template("<|assistant|>\n");
      out.append_data(msg.content);
      out.append_template("<|end|>\n");
    }
  }
  // Phi-3.5's template ends a conversation without generation prompt with EOS.
  if (phi3_system_) out.append_template(gen ? "<|assistant|>\n" : eos_);
}

// Zephyr: <|role|>\n{content}</s>\n per message, then <|assistant|>\n.
void ChatTemplate::render_zephyr(std::span<const ChatMessage> m, bool gen, PromptText& out) const {
  for (const auto& msg : m) {
    out.append_template("<|");
    append_role(out, msg.role);
    out.append_template("|>\n");
    out.append_data(msg.content);
    out.append_template(eos_ + "\n");
  }
  if (gen) out.append_template("<|assistant|>\n");
}

// The template itself, interpreted with transformers' context (messages,
// add_generation_prompt, bos_token, eos_token; tools and reasoning_effort when given),
// the messages, tools and effort as data; a leading BOS is
// dropped when the tokenizer adds one. A template that fails at render time (e.g. its
// raise_exception for a role it rejects) falls back to chatml for this conversation, with
// a warning; one that goes over its limits (RenderLimits) is an error.
Result<PromptText> ChatTemplate::run_jinja(const JinjaTemplate& t, std::span<const ChatMessage> m,
                                           bool gen, std::string_view tools,
                                           std::string_view effort) const {
  using ojson = nlohmann::ordered_json;
  ojson messages = ojson::array();
  for (const auto& msg : m) {
    ojson j = {{"role", msg.role}, {"content", msg.content}};
    if (!msg.tool_calls.empty()) {
      ojson calls = ojson::array();
      const ojson given = ojson::parse(msg.tool_calls, nullptr, false);
      if (!given.is_array()) return invalid_argument("tool_calls: expected a JSON array");
      for (const ojson& c : given) calls.push_back({{"type", "function"}, {"function", c}});
      j["tool_calls"] = std::move(calls);
    }
    if (!msg.tool_name.empty()) j["name"] = msg.tool_name;
    messages.push_back(std::move(j));
  }
  ojson context = {{"messages", messages},
                   {"add_generation_prompt", gen},
                   {"bos_token", bos_},
                   {"eos_token", eos_}};
  if (!tools.empty()) {
    ojson parsed = ojson::parse(tools, nullptr, false);
    if (!parsed.is_array()) return invalid_argument("tools: expected a JSON array");
    context["tools"] = std::move(parsed);
  }
  if (!effort.empty()) context["reasoning_effort"] = std::string(effort);
  RenderOptions options;
  options.data_vars = {"messages", "tools", "reasoning_effort"};
  options.trusted_strings = {"system", "user", "assistant", "tool"};  // roles the server validates
  options.limits = limits_;
  options.fixed_time = fixed_time_;
  auto out = t.render(context, options);
  if (!out.is_ok()) return out.status();
  PromptText text = std::move(out).value();
  if (add_bos_ && !bos_.empty() && text.text.starts_with(bos_)) text.erase_prefix(bos_.size());
  return text;
}

// Tools go through the template itself; a template that fails here fails the request
// (falling back to chatml would silently drop the tools).
Result<PromptText> ChatTemplate::render_tools(std::span<const ChatMessage> m, bool gen,
                                              std::string_view tools,
                                              std::string_view effort) const {
  if (!tools_jinja_) return unsupported("this model's chat template does not support tools");
  return run_jinja(*tools_jinja_, m, gen, tools, effort);
}

Result<PromptText> ChatTemplate::render_jinja(std::span<const ChatMessage> m, bool gen,
                                              std::string_view effort) const {
  auto out = run_jinja(*jinja_, m, gen, {}, effort);
  if (out.status().code() == StatusCode::kResourceExhausted) return out.status();
  if (!out.is_ok()) {
    spdlog::warn("{}; using chatml for this conversation", out.status().message());
    PromptText chatml;
    render_chatml(m, gen, chatml);
    return chatml;
  }
  return out;
}

}  // namespace hypura::tokenizer
