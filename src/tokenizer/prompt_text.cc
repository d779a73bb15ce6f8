#include "tokenizer/prompt_text.h"

#include <algorithm>

namespace hypura::tokenizer {

void PromptText::append(const PromptText& p) {
  size_t pos = 0;
  for (const TextRange& r : p.data) {
    append_template(std::string_view(p.text).substr(pos, r.begin - pos));
    append_data(std::string_view(p.text).substr(r.begin, r.end - r.begin));
    pos = r.end;
  }
  append_template(std::string_view(p.text).substr(pos));
}

PromptText PromptText::slice(size_t begin, size_t end) const {
  end = std::min(end, text.size());
  begin = std::min(begin, end);
  PromptText out;
  out.text = text.substr(begin, end - begin);
  for (const TextRange& r : data) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) out.data.push_back({b - begin, e - begin});
  }
  return out;
}

}  // namespace hypura::tokenizer
