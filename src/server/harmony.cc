#include "server/harmony.h"

#include <array>
#include <utility>

namespace hypura::server {
namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
// What ends a message's body: <|channel|> opens the next header itself.
constexpr std::array<std::string_view, 5> kBodyEnds = {"<|end|>", "<|start|>", "<|return|>",
                                                       "<|call|>", kChannel};

// The word after `key` in a header ("analysis" after "<|channel|>", "functions.f" after
// "to="), up to a space or the next marker; "" when the header has no `key`.
std::string word_after(std::string_view header, std::string_view key) {
  size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  at = header.find_first_not_of(' ', at + key.size());
  if (at == std::string_view::npos) return {};
  const size_t end = header.find_first_of(" \t\n<", at);
  return std::string(header.substr(at, end == std::string_view::npos ? end : end - at));
}

}  // namespace

ReplyPieces HarmonyParser::push(std::string_view piece) {
  ReplyPieces out;
  buffer_.append(piece);
  if (at_start_) {
    const size_t first = buffer_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || buffer_.size() - first < 2) return out;  // undecided
    at_start_ = false;
    if (buffer_.compare(first, 2, "<|") != 0) in_header_ = false;  // no markup: content
  }
  drain(&out);
  return out;
}

ReplyPieces HarmonyParser::finish() {
  ReplyPieces out;
  // A header cut short (the token limit inside "<|channel|>final") is markup: dropped.
  if (at_start_ || !in_header_) {
    emit(buffer_, &out);
    end_message(&out);
  }
  buffer_.clear();
  in_header_ = false;
  return out;
}

void HarmonyParser::drain(ReplyPieces* out) {
  for (;;) {
    if (in_header_ && !read_header()) return;
    size_t end = std::string::npos;
    std::string_view marker;
    for (std::string_view m : kBodyEnds) {
      if (const size_t at = buffer_.find(m); at < end) {
        end = at;
        marker = m;
      }
    }
    if (end == std::string::npos) {
      size_t keep = 0;
      for (std::string_view m : kBodyEnds) keep = std::max(keep, partial_marker(buffer_, m));
      emit(std::string_view(buffer_).substr(0, buffer_.size() - keep), out);
      buffer_.erase(0, buffer_.size() - keep);
      return;
    }
    emit(std::string_view(buffer_).substr(0, end), out);
    end_message(out);
    buffer_.erase(0, end + (marker == kChannel ? 0 : marker.size()));
    in_header_ = true;
  }
}

bool HarmonyParser::read_header() {
  const size_t at = buffer_.find(kMessage);
  if (at == std::string::npos) return false;
  const std::string_view header(buffer_.data(), at);
  const std::string channel = word_after(header, kChannel);
  const std::string recipient = word_after(header, "to=");
  constexpr std::string_view kFunctions = "functions.";
  if (recipient.compare(0, kFunctions.size(), kFunctions) == 0) {
    body_ = Body::kCall;
    call_name_ = recipient.substr(kFunctions.size());
  } else if (channel == "analysis" || !recipient.empty()) {
    body_ = Body::kThinking;  // reasoning, and calls of built-in tools we do not offer
  } else {
    body_ = Body::kContent;  // "final", and commentary the user is meant to see
  }
  buffer_.erase(0, at + kMessage.size());
  in_header_ = false;
  return true;
}

void HarmonyParser::emit(std::string_view text, ReplyPieces* out) {
  switch (body_) {
    case Body::kContent:
      out->text.append(text);
      break;
    case Body::kThinking:
      out->thinking.append(text);
      break;
    case Body::kCall:
      call_body_.append(text);
      break;
  }
}

void HarmonyParser::end_message(ReplyPieces* out) {
  if (body_ == Body::kCall) {
    nlohmann::json args = nlohmann::json::parse(call_body_, nullptr, false);
    // Arguments that are not a JSON object are handed on as the model wrote them.
    if (!args.is_object()) args = call_body_;
    out->calls.push_back(ToolCall{std::move(call_name_), std::move(args)});
    call_name_.clear();
    call_body_.clear();
  }
  body_ = Body::kContent;
}

}  // namespace hypura::server
