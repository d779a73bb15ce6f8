#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <spdlog/spdlog.h>

#include <initializer_list>

namespace hypura::tokenizer {
namespace {

// The split patterns below are the models' own pre-tokenizer regexes (their
// tokenizer.json), with `(?i:'s|...)` spelled out ASCII-only as llama.cpp does, so
// non-ASCII case folding cannot change the split.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kContractions =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";
// llama3 and qwen2 differ only in how many digits make one word.
std::string llama3_like(const char* digits) {
  return std::string(kContractions) + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|)" + digits +
         R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}
// Case classes of the tekken and gpt-4o words, as llama.cpp evaluates them: "a letter
// that is not a-z" and "a letter that is not A-Z", so every non-ASCII letter is in both
// and combining marks are in neither (the models' own regexes use \p{Lu}/\p{Ll} and \p{M}).
constexpr const char* kUpperish = R"([^\P{L}a-z])";
constexpr const char* kLowerish = R"([^\P{L}A-Z])";
// tekken and gpt-4o differ only in the contraction suffix and the digit run.
std::string cased_words(const std::string& suffix, const char* digits) {
  const std::string lead = R"([^\r\n\p{L}\p{N}]?)";
  const std::string up = kUpperish, low = kLowerish;
  return lead + up + "*" + low + "+" + suffix + "|" + lead + up + "+" + low + "*" + suffix + "|" +
         digits + R"(| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}
// DeepSeek LLM: cased letters (Unicode LC), ASCII and full-width punctuation, CJK.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

// PCRE2's \s matches U+180E, which llama.cpp (Unicode White_Space) does not; U+200B, a
// format character like it and of the same UTF-8 length, splits as llama.cpp does.
std::string mongolian_vowel_separator_as_format(std::string_view text) {
  constexpr std::string_view kMvs = "\xE1\xA0\x8E", kZwsp = "\xE2\x80\x8B";
  std::string out(text);
  for (size_t p = 0; (p = out.find(kMvs, p)) != std::string::npos; p += kZwsp.size()) {
    out.replace(p, kMvs.size(), kZwsp);
  }
  return out;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::vector<std::string> PreTokenizer::regexes_for(const std::string& pre, bool* ignore_merges) {
  *ignore_merges = false;
  if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"})) {
    *ignore_merges = true;
    return {llama3_like(R"(\p{N}{1,3})")};
  }
  if (is_one_of(pre, {"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"})) {
    return {llama3_like(R"(\p{N}{1,3})")};
  }
  if (is_one_of(pre, {"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan"})) {
    return {llama3_like(R"(\p{N})")};
  }
  if (is_one_of(pre, {"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
                      "jina-v2-de", "exaone4", "trillion", "roberta-bpe"})) {
    return {kGpt2};
  }
  if (is_one_of(pre, {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                      "minerva-7b"})) {
    return {R"(\p{N})", kGpt2};
  }
  if (pre == "deepseek-llm") {
    return {"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kCjk, R"(\p{N}+)"};
  }
  if (pre == "deepseek-coder") {
    return {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"};
  }
  if (pre == "deepseek-v3") {
    return {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?)"
            R"([\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "falcon") {
    return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  }
  if (pre == "tekken") {
    *ignore_merges = true;
    return {cased_words("", R"(\p{N})")};
  }
  if (is_one_of(pre, {"gpt-4o", "llama4"})) {
    return {cased_words(std::string(kContractions) + "?", R"(\p{N}{1,3})")};
  }
  if (pre != "default") {
    spdlog::warn("tokenizer: unknown pre-tokenizer '{}', using the default regexes", pre);
  }
  return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(
    const std::vector<std::string>& regexes) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  for (const auto& pattern : regexes) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof(msg));
      return invalid_argument("pre-tokenizer regex does not compile at offset " +
                              std::to_string(error_offset) + ": " +
                              reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: without it the interpreter gives the same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    pt->regexes_.push_back(std::move(compiled));
  }
  return pt;
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::pair<size_t, size_t>> PreTokenizer::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces = {{0, text.size()}};
  if (text.empty()) return {};
  std::string replaced;
  if (text.find("\xE1\xA0\x8E") != std::string_view::npos) {
    replaced = mongolian_vowel_separator_as_format(text);
    text = replaced;
  }
  std::vector<std::pair<size_t, size_t>> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (const auto& [offset, length] : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + offset);
      size_t start = 0;  // end of the last match, relative to the piece
      size_t pos = 0;    // where the next search starts
      while (pos < length) {
        // The text is valid UTF-8 (REQUIRES), so skip PCRE2's O(n) check per call.
        int rc = pcre2_match(re->code, subject, length, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
          // A resource limit (JIT stack, match limit): retry with the interpreter rather
          // than silently leaving the rest of the piece unsplit.
          spdlog::warn("tokenizer: regex match failed ({}), retrying without JIT", rc);
          rc = pcre2_match(re->code, subject, length, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                           nullptr);
        }
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) {  // empty match: step over one character
          pos = ov[0] + 1;
          while (pos < length && (subject[pos] & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (ov[0] > start) next.emplace_back(offset + start, ov[0] - start);
        next.emplace_back(offset + ov[0], ov[1] - ov[0]);
        start = pos = ov[1];
      }
      if (start < length) next.emplace_back(offset + start, length - start);
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace hypura::tokenizer
