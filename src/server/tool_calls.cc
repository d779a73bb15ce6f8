#include "server/tool_calls.h"

#include <algorithm>

#include "grammar/automaton.h"

namespace hypura::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFence = "```";
constexpr std::string_view kBlank = " \t\r\n";

// `text` without the blanks around it and, when it is one Markdown code block, its fences.
std::string_view unfenced(std::string_view text) {
  auto trim = [](std::string_view t) {
    const size_t b = t.find_first_not_of(kBlank);
    if (b == std::string_view::npos) return std::string_view();
    return t.substr(b, t.find_last_not_of(kBlank) - b + 1);
  };
  text = trim(text);
  if (!text.starts_with(kFence) || !text.ends_with(kFence) || text.size() < 2 * kFence.size())
    return text;
  const size_t line = text.find('\n');
  if (line == std::string_view::npos) return text;
  return trim(text.substr(line, text.size() - kFence.size() - line));
}

}  // namespace

bool parse_tool_call(std::string_view body, ToolCall* call) {
  const nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (!j.is_object()) return false;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return false;
  call->name = name->get<std::string>();
  call->arguments = nlohmann::json::object();
  if (const auto args = j.find("arguments"); args != j.end() && !args->is_null()) {
    if (args->is_string()) {  // some models write the arguments as a JSON string
      nlohmann::json inner =
          nlohmann::json::parse(args->get_ref<const std::string&>(), nullptr, false);
      call->arguments = inner.is_object() ? inner : *args;
    } else {
      call->arguments = *args;
    }
  }
  return true;
}

void ToolCallParser::drain(Output* out) {
  for (;;) {
    if (!in_call_) {
      const size_t open = buffer_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_marker(buffer_, kOpen);
        out->text += buffer_.substr(0, buffer_.size() - keep);
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      out->text += buffer_.substr(0, open);
      buffer_.erase(0, open + kOpen.size());
      in_call_ = true;
    }
    const size_t close = buffer_.find(kClose);
    if (close == std::string::npos) return;  // the call's body is still coming
    ToolCall call;
    if (parse_tool_call(std::string_view(buffer_).substr(0, close), &call)) {
      out->calls.push_back(std::move(call));
    } else {
      out->text += std::string(kOpen) + buffer_.substr(0, close + kClose.size());
    }
    buffer_.erase(0, close + kClose.size());
    in_call_ = false;
  }
}

std::vector<OfferedTool> offered_tools(const std::string& tools_json) {
  std::vector<OfferedTool> tools;
  for (const nlohmann::json& t : nlohmann::json::parse(tools_json, nullptr, false)) {
    const nlohmann::json& fn = t["function"];
    OfferedTool tool{fn["name"].get<std::string>(), nullptr};
    if (const auto params = fn.find("parameters"); params != fn.end() && params->is_object()) {
      auto compiled = grammar::compile_json_schema(*params);
      if (compiled.is_ok()) tool.parameters = std::move(compiled).value();
    }
    tools.push_back(std::move(tool));
  }
  return tools;
}

bool ToolCallParser::offered(const ToolCall& call) const {
  for (const OfferedTool& t : tools_) {
    if (t.name != call.name) continue;
    return t.parameters == nullptr ||
           grammar::accepts_document(*t.parameters, call.arguments.dump());
  }
  return false;
}

bool ToolCallParser::bare_calls(std::vector<ToolCall>* calls) const {
  const std::string_view reply = unfenced(buffer_);
  const nlohmann::json j = nlohmann::json::parse(reply.begin(), reply.end(), nullptr, false);
  if (!j.is_object() && !(j.is_array() && !j.empty())) return false;
  for (const nlohmann::json& item : j.is_array() ? j : nlohmann::json::array({j})) {
    ToolCall call;
    if (!item.is_object() || !parse_tool_call(item.dump(), &call) || !offered(call)) {
      return false;
    }
    calls->push_back(std::move(call));
  }
  return true;
}

ToolCallParser::Output ToolCallParser::push(std::string_view piece) {
  Output out;
  buffer_.append(piece);
  if (at_start_ && !decide_bare()) return out;
  if (!bare_) drain(&out);
  return out;
}

bool ToolCallParser::decide_bare() {
  size_t first = buffer_.find_first_not_of(kBlank);
  if (first == std::string::npos) return false;  // only whitespace yet
  const std::string_view rest = std::string_view(buffer_).substr(first);
  if (rest.size() < kFence.size() && kFence.starts_with(rest)) return false;
  if (rest.starts_with(kFence)) {  // a code block: what its first line opens decides
    const size_t line = buffer_.find('\n', first);
    if (line == std::string::npos) return false;
    first = buffer_.find_first_not_of(kBlank, line);
    if (first == std::string::npos) return false;
  }
  at_start_ = false;
  bare_ = buffer_[first] == '{' || buffer_[first] == '[';
  return true;
}

ToolCallParser::Output ToolCallParser::finish() {
  Output out;
  if (bare_) {
    bare_ = false;
    if (bare_calls(&out.calls)) {
      buffer_.clear();
      return out;
    }
    drain(&out);  // not bare calls: the held text, with any tagged calls in it
  }
  ToolCall call;
  if (in_call_ && parse_tool_call(buffer_, &call)) {
    out.calls.push_back(std::move(call));
  } else {
    out.text += (in_call_ ? std::string(kOpen) : std::string()) + buffer_;
  }
  buffer_.clear();
  in_call_ = false;
  return out;
}

}  // namespace hypura::server
