// Tokenizer::from_metadata lives apart so that code using only from_vocab (unit tests)
// does not need the GGUF reader.
#include "tokenizer/tokenizer.h"

namespace hypura::tokenizer {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_metadata(const gguf::Metadata& metadata) {
  HYPURA_ASSIGN_OR_RETURN(Vocab vocab, vocab_from_metadata(metadata));
  return from_vocab(std::move(vocab));
}

}  // namespace hypura::tokenizer
