// The pushdown automaton over bytes that a Grammar (json_schema.h) defines.
//
// A thread is a stack of Frames: the root, then one frame per open object, array, key,
// string, number or literal. A byte moves the top frame; a finished value pops its frame
// and moves its parent. anyOf/oneOf make the language nondeterministic, so a State holds
// several threads (one per alternative still alive; identical threads are merged); a byte
// is accepted when at least one thread takes it. Every state a byte leads to can still be
// completed to a valid document (values that would nest past kMaxDepth are refused
// before they start), so constrained generation never paints itself into a corner.
//
// step() writes into a caller-owned State and never allocates: the token-mask walk
// (token_mask.h) keeps one State per trie depth.
//
// Thread-safety: step() and friends are pure functions of their arguments; a Grammar may
// be shared, States are the caller's.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "grammar/json_schema.h"
#include "grammar/string_lexer.h"

namespace hypura::grammar {

inline constexpr int kMaxThreads = 16;   // alternatives alive at once (more are dropped)
inline constexpr int kMaxFrames = 256;   // frames of all threads of a State together
inline constexpr int kEndOfInput = 256;  // the "byte" that asks whether the document is whole

enum class FrameType : uint8_t { kRoot, kObject, kKey, kArray, kString, kNumber, kLiteral };

// One level of a thread's stack. A plain value (no padding) so threads compare with memcmp.
struct Frame {
  int32_t node = kNoNode;  // Grammar::nodes index (kKey: the object's node)
  FrameType type = FrameType::kRoot;
  uint8_t phase = 0;   // where in the value (per type, automaton.cc)
  uint8_t sub = 0;     // StrSub inside strings and keys
  uint8_t ws = 0;      // the whitespace run so far (0: none)
  uint32_t count = 0;  // array items; string characters; key/literal byte position;
                       // number integer digits
  uint32_t lo = 0;     // key/literal candidates [lo, hi); object: the pending property;
  uint32_t hi = 0;     // number: fraction and exponent digits
  uint32_t flags = 0;  // key: free (not a named property) still possible
  uint64_t mask = 0;   // object: properties used; key: properties it cannot be
};
static_assert(sizeof(Frame) == 32, "Frame must have no padding (threads compare with memcmp)");

struct State {
  int n_threads = 0;
  std::array<uint16_t, kMaxThreads + 1> begin{};  // thread t: frames[begin[t], begin[t + 1])
  std::array<Frame, kMaxFrames> frames{};

  const Frame* thread(int t) const { return frames.data() + begin[t]; }
  int depth(int t) const { return begin[t + 1] - begin[t]; }
  const Frame& top(int t) const { return frames[begin[t + 1] - 1]; }
};

// The state before any byte: one thread holding the root frame for `root`.
void initial_state(const Grammar& g, int32_t root, State* out);

// Feeds byte c (0-255, or kEndOfInput) to every thread of `in`; the survivors land in
// *out. False (and out->n_threads == 0) when no thread takes it. REQUIRES: &in != out.
bool step(const Grammar& g, const State& in, int c, State* out);

// Whether the bytes fed so far are a whole document (the end of input may come now).
bool accepts_end(const Grammar& g, const State& s, State* scratch);

// Whether some byte may follow (false once a document has nothing left to add).
bool can_continue(const Grammar& g, const State& s, State* scratch);

// Whether every byte of `bytes` is accepted from `s`; the state after them in *out.
// REQUIRES: *a and *b are distinct scratch states.
bool step_bytes(const Grammar& g, const State& s, std::string_view bytes, State* a, State* b,
                const State** out);

// Whether `text` as a whole is a document of the grammar (validation, not sampling).
bool accepts_document(const Grammar& g, std::string_view text);

// Where a thread's top frame stands inside a string value or a free object key (one
// that may name no property), for the vocabulary fast path (token_mask.h).
struct StringTop {
  StrSub sub = StrSub::kNormal;
  bool key = false;   // a key: free keys take no backslash escape
  uint32_t room = 0;  // characters the string may still start (kUnbounded: any)
};
// Fills one StringTop per thread; false when some thread's top is anything else.
bool string_tops(const Grammar& g, const State& s, std::array<StringTop, kMaxThreads>* out);

}  // namespace hypura::grammar
