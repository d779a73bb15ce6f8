// Chat templates the binary carries (src/tokenizer/templates/, compiled in by
// src/tokenizer/CMakeLists.txt): for model files of a family whose template we know
// but that carry none, and for `hypura synth`'s presets of that family.
//
// Thread-safety: constants.
#pragma once

#include <string_view>

namespace hypura::tokenizer {

// gpt-oss's chat template (harmony format), byte for byte as the model was released with.
std::string_view gpt_oss_chat_template();

}  // namespace hypura::tokenizer
