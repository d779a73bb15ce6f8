#include "server/tool_calls.h"

#include <algorithm>

namespace hypura::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

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

bool ToolCallParser::bare_calls(std::vector<ToolCall>* calls) const {
  const nlohmann::json j = nlohmann::json::parse(buffer_, nullptr, false);
  if (!j.is_object() && !(j.is_array() && !j.empty())) return false;
  for (const nlohmann::json& item : j.is_array() ? j : nlohmann::json::array({j})) {
    ToolCall call;
    if (!item.is_object() || !parse_tool_call(item.dump(), &call) ||
        std::find(names_.begin(), names_.end(), call.name) == names_.end()) {
      return false;
    }
    calls->push_back(std::move(call));
  }
  return true;
}

ToolCallParser::Output ToolCallParser::push(std::string_view piece) {
  Output out;
  buffer_.append(piece);
  if (at_start_) {
    const size_t first = buffer_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return out;  // only whitespace yet
    at_start_ = false;
    bare_ = buffer_[first] == '{' || buffer_[first] == '[';
  }
  if (!bare_) drain(&out);
  return out;
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
