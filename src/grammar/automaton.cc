#include "grammar/automaton.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace hypura::grammar {
namespace {

// Phases of each frame type.
enum RootPhase : uint8_t { kRootStart, kRootValue, kRootDone };
enum ObjectPhase : uint8_t {
  kObjOpen,     // before '{'
  kObjFirst,    // after '{': a key or '}'
  kObjKey,      // a key frame is above
  kObjColon,    // after the key: ':'
  kObjValueWs,  // after ':': the value's first byte
  kObjValue,    // the value's frame is above
  kObjAfter,    // after a value: ',' or '}'
  kObjNext,     // after ',': a key
};
enum ArrayPhase : uint8_t { kArrOpen, kArrFirst, kArrValue, kArrAfter, kArrNext };
enum StringPhase : uint8_t { kStrOpen, kStrIn };
enum NumberPhase : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,
  kNumExpSign,
  kNumExpDigits
};

constexpr uint32_t kAdditionalKey = UINT32_MAX;  // a key that names no property
constexpr uint32_t kMaxIntDigits = 18;
constexpr uint32_t kMaxFracDigits = 16;
constexpr uint32_t kMaxExpDigits = 3;
constexpr uint8_t kMaxWsAfterNewline = 20;

// What feeding a byte to the top frame did.
enum class Act : uint8_t {
  kReject,
  kConsumed,
  kPopRefeed,    // the top value ended before this byte: pop it, feed the byte to its parent
  kPopConsumed,  // the byte ended the top value (a closing quote or bracket)
  kStartValue,   // the parent moved on; a value of *start_node begins with this byte
};

struct Stack {
  Frame* f;
  int n;
  int cap;
  Frame& top() { return f[n - 1]; }
};

// Whitespace between tokens: nothing, one space, or a newline and at most 20 spaces/tabs.
enum class Ws : uint8_t { kNotWs, kTaken, kReject };
Ws take_ws(uint8_t& ws, int c) {
  const bool after_newline = ws >= 2;
  if (c == '\n') {
    if (ws != 0) return Ws::kReject;
    ws = 2;
    return Ws::kTaken;
  }
  if (c == ' ' || c == '\t') {
    if (ws == 0 && c == ' ') {
      ws = 1;
      return Ws::kTaken;
    }
    if (!after_newline || ws >= 2 + kMaxWsAfterNewline) return Ws::kReject;
    ++ws;
    return Ws::kTaken;
  }
  return Ws::kNotWs;
}

bool fits(const Grammar& g, int depth_below, int32_t node) {
  return node != kNoNode && depth_below + g.nodes[node].need <= kMaxDepth;
}

Frame value_frame(const Grammar& g, int32_t node) {
  Frame f;
  f.node = node;
  const Node& n = g.nodes[node];
  switch (n.kind) {
    case NodeKind::kObject:
      f.type = FrameType::kObject;
      break;
    case NodeKind::kArray:
      f.type = FrameType::kArray;
      break;
    case NodeKind::kString:
      f.type = FrameType::kString;
      break;
    case NodeKind::kNumber:
    case NodeKind::kInteger:
      f.type = FrameType::kNumber;
      break;
    case NodeKind::kLiteral:
      f.type = FrameType::kLiteral;
      f.hi = static_cast<uint32_t>(n.literals.size());
      break;
    case NodeKind::kUnion:
      break;  // never a frame: its alternatives are
  }
  return f;
}

// Properties the next key of the object at stack index `at` may not name: those used,
// and those whose value would nest too deep.
uint64_t blocked_props(const Grammar& g, const Frame& obj, int at) {
  const Node& n = g.nodes[obj.node];
  uint64_t blocked = obj.mask;
  for (size_t i = 0; i < n.prop_nodes.size(); ++i) {
    if (!fits(g, at + 1, n.prop_nodes[i])) blocked |= uint64_t{1} << i;
  }
  return blocked;
}

bool free_key_fits(const Grammar& g, const Frame& obj, int at) {
  return fits(g, at + 1, g.nodes[obj.node].additional);
}

uint64_t all_props(const Node& n) {
  return n.prop_names.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.prop_names.size()) - 1;
}

bool key_possible(const Grammar& g, const Frame& obj, int at) {
  return (all_props(g.nodes[obj.node]) & ~blocked_props(g, obj, at)) != 0 ||
         free_key_fits(g, obj, at);
}

// Pushes the frame of an object key (the opening quote was just read).
Act open_key(const Grammar& g, Stack& s) {
  const int at = s.n - 1;
  Frame& obj = s.top();
  if (s.n >= s.cap || !key_possible(g, obj, at)) return Act::kReject;
  Frame key;
  key.node = obj.node;
  key.type = FrameType::kKey;
  key.sub = static_cast<uint8_t>(StrSub::kNormal);
  key.hi = static_cast<uint32_t>(g.nodes[obj.node].prop_names.size());
  key.flags = free_key_fits(g, obj, at) ? 1 : 0;
  key.mask = blocked_props(g, obj, at);
  obj.phase = kObjKey;
  s.f[s.n++] = key;
  return Act::kConsumed;
}

// A container's opening bracket, then the whitespace between its tokens; nullopt when c
// is something else, for the phase to judge.
std::optional<Act> open_or_ws(Frame& f, int c, char open, uint8_t open_phase, uint8_t first_phase) {
  if (f.phase == open_phase) {
    if (c != open) return Act::kReject;
    f.phase = first_phase;
    return Act::kConsumed;
  }
  switch (take_ws(f.ws, c)) {
    case Ws::kTaken:
      return Act::kConsumed;
    case Ws::kReject:
      return Act::kReject;
    case Ws::kNotWs:
      f.ws = 0;
      break;
  }
  return std::nullopt;
}

bool required_done(const Grammar& g, const Frame& obj) {
  return (g.nodes[obj.node].required & ~obj.mask) == 0;
}

Act feed_object(const Grammar& g, Stack& s, int c, int32_t* start_node) {
  Frame& f = s.top();
  const Node& n = g.nodes[f.node];
  if (const std::optional<Act> a = open_or_ws(f, c, '{', kObjOpen, kObjFirst)) return *a;
  switch (f.phase) {
    case kObjFirst:
      if (c == '"') return open_key(g, s);
      return c == '}' && required_done(g, f) ? Act::kPopConsumed : Act::kReject;
    case kObjColon:
      if (c != ':') return Act::kReject;
      f.phase = kObjValueWs;
      return Act::kConsumed;
    case kObjValueWs:
      f.phase = kObjValue;
      *start_node = f.lo == kAdditionalKey ? n.additional : n.prop_nodes[f.lo];
      return Act::kStartValue;
    case kObjAfter:
      if (c == ',') {
        if (!key_possible(g, f, s.n - 1)) return Act::kReject;
        f.phase = kObjNext;
        return Act::kConsumed;
      }
      return c == '}' && required_done(g, f) ? Act::kPopConsumed : Act::kReject;
    case kObjNext:
      return c == '"' ? open_key(g, s) : Act::kReject;
    default:
      return Act::kReject;  // kObjKey, kObjValue: a frame above is the top
  }
}

Act feed_key(const Grammar& g, Frame& f, int c) {
  const Node& n = g.nodes[f.node];
  if (c == kEndOfInput) return Act::kReject;
  StrSub sub = static_cast<StrSub>(f.sub);
  const StrStep r = str_step(sub, static_cast<uint8_t>(c));
  if (r == StrStep::kReject) return Act::kReject;
  const bool is_free = f.flags != 0;
  if (r == StrStep::kClose) {
    if (f.lo < f.hi && n.prop_names[f.lo].size() == f.count) {  // names exactly a property
      if ((f.mask >> f.lo) & 1) return Act::kReject;            // used, or too deep
      return Act::kPopConsumed;                                 // f.lo: the property
    }
    if (!is_free) return Act::kReject;
    f.lo = kAdditionalKey;
    return Act::kPopConsumed;
  }
  if (static_cast<StrSub>(f.sub) == StrSub::kNormal && c == '\\')
    f.flags = 0;  // free keys have no escapes
  f.sub = static_cast<uint8_t>(sub);
  // Names sharing the f.count bytes read so far are [lo, hi); keep those going on with c.
  uint32_t lo = f.lo;
  while (lo < f.hi && (n.prop_names[lo].size() <= f.count ||
                       static_cast<uint8_t>(n.prop_names[lo][f.count]) < c)) {
    ++lo;
  }
  uint32_t hi = lo;
  while (hi < f.hi && static_cast<uint8_t>(n.prop_names[hi][f.count]) == c) ++hi;
  f.lo = lo;
  f.hi = hi;
  bool named = false;
  for (uint32_t i = lo; i < hi && !named; ++i) named = ((f.mask >> i) & 1) == 0;
  if (!named && f.flags == 0) return Act::kReject;
  ++f.count;
  return Act::kConsumed;
}

Act feed_array(const Grammar& g, Stack& s, int c, int32_t* start_node) {
  Frame& f = s.top();
  const Node& n = g.nodes[f.node];
  if (const std::optional<Act> a = open_or_ws(f, c, '[', kArrOpen, kArrFirst)) return *a;
  const bool item_fits = n.max_items > 0 && fits(g, s.n, n.items);
  switch (f.phase) {
    case kArrFirst:
      if (c == ']') return n.min_items == 0 ? Act::kPopConsumed : Act::kReject;
      if (c == kEndOfInput || !item_fits) return Act::kReject;
      f.phase = kArrValue;
      *start_node = n.items;
      return Act::kStartValue;
    case kArrAfter:
      if (c == ',') {
        if (f.count >= n.max_items || !item_fits) return Act::kReject;
        f.phase = kArrNext;
        return Act::kConsumed;
      }
      return c == ']' && f.count >= n.min_items ? Act::kPopConsumed : Act::kReject;
    case kArrNext:
      if (c == kEndOfInput) return Act::kReject;
      f.phase = kArrValue;
      *start_node = n.items;
      return Act::kStartValue;
    default:
      return Act::kReject;
  }
}

Act feed_string(const Grammar& g, Frame& f, int c) {
  if (c == kEndOfInput) return Act::kReject;
  if (f.phase == kStrOpen) {
    if (c != '"') return Act::kReject;
    f.phase = kStrIn;
    return Act::kConsumed;
  }
  const Node& n = g.nodes[f.node];
  StrSub sub = static_cast<StrSub>(f.sub);
  switch (str_step(sub, static_cast<uint8_t>(c))) {
    case StrStep::kReject:
      return Act::kReject;
    case StrStep::kClose:
      return f.count >= n.min_length ? Act::kPopConsumed : Act::kReject;
    case StrStep::kStart:
      if (f.count >= n.max_length) return Act::kReject;
      ++f.count;
      break;
    case StrStep::kMore:
      break;
  }
  f.sub = static_cast<uint8_t>(sub);
  return Act::kConsumed;
}

Act feed_number(const Grammar& g, Frame& f, int c) {
  const bool integer = g.nodes[f.node].kind == NodeKind::kInteger;
  const bool digit = c >= '0' && c <= '9';
  const bool exp = !integer && (c == 'e' || c == 'E');
  const auto go = [&f](uint8_t phase) {
    f.phase = phase;
    return Act::kConsumed;
  };
  switch (f.phase) {
    case kNumStart:
      if (c == '-') return go(kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') return go(kNumZero);
      if (!digit) return Act::kReject;
      f.count = 1;
      return go(kNumInt);
    case kNumZero:
    case kNumInt:
      if (digit) {
        if (f.phase == kNumZero || f.count >= kMaxIntDigits) return Act::kReject;
        ++f.count;
        return Act::kConsumed;
      }
      if (c == '.' && !integer) return go(kNumDot);
      if (exp) return go(kNumExp);
      return Act::kPopRefeed;
    case kNumDot:
      if (!digit) return Act::kReject;
      f.lo = 1;
      return go(kNumFrac);
    case kNumFrac:
      if (digit) {
        if (f.lo >= kMaxFracDigits) return Act::kReject;
        ++f.lo;
        return Act::kConsumed;
      }
      return exp ? go(kNumExp) : Act::kPopRefeed;
    case kNumExp:
      if (c == '+' || c == '-') return go(kNumExpSign);
      [[fallthrough]];
    case kNumExpSign:
      if (!digit) return Act::kReject;
      f.hi = 1;
      return go(kNumExpDigits);
    case kNumExpDigits:
      if (!digit) return Act::kPopRefeed;
      if (f.hi >= kMaxExpDigits) return Act::kReject;
      ++f.hi;
      return Act::kConsumed;
    default:
      return Act::kReject;
  }
}

Act feed_literal(const Grammar& g, Frame& f, int c) {
  const std::vector<std::string>& lits = g.nodes[f.node].literals;
  const uint32_t pos = f.count;
  if (c != kEndOfInput) {
    // Candidates share their first `pos` bytes; keep those whose next byte is c.
    uint32_t lo = f.lo;
    while (lo < f.hi && (lits[lo].size() <= pos || static_cast<uint8_t>(lits[lo][pos]) < c)) ++lo;
    uint32_t hi = lo;
    while (hi < f.hi && static_cast<uint8_t>(lits[hi][pos]) == c) ++hi;
    if (lo < hi) {
      f.lo = lo;
      f.hi = hi;
      ++f.count;
      return Act::kConsumed;
    }
  }
  // A candidate equal to what was read sorts first.
  return f.lo < f.hi && lits[f.lo].size() == pos ? Act::kPopRefeed : Act::kReject;
}

Act feed_root(const Grammar& g, Frame& f, int c, int32_t* start_node) {
  switch (f.phase) {
    case kRootStart:
      if (c == kEndOfInput) return Act::kReject;
      f.phase = kRootValue;
      *start_node = f.node;
      return Act::kStartValue;
    case kRootDone:
      return c == kEndOfInput ? Act::kConsumed : Act::kReject;
    default:
      return Act::kReject;
  }
}

Act feed_top(const Grammar& g, Stack& s, int c, int32_t* start_node) {
  Frame& f = s.top();
  switch (f.type) {
    case FrameType::kRoot:
      return feed_root(g, f, c, start_node);
    case FrameType::kObject:
      return c == kEndOfInput ? Act::kReject : feed_object(g, s, c, start_node);
    case FrameType::kKey:
      return feed_key(g, f, c);
    case FrameType::kArray:
      return feed_array(g, s, c, start_node);
    case FrameType::kString:
      return feed_string(g, f, c);
    case FrameType::kNumber:
      return feed_number(g, f, c);
    case FrameType::kLiteral:
      return feed_literal(g, f, c);
  }
  return Act::kReject;
}

// The parent of a finished value moves on.
void child_done(Frame& parent, const Frame& child) {
  parent.ws = 0;
  switch (parent.type) {
    case FrameType::kRoot:
      parent.phase = kRootDone;
      break;
    case FrameType::kObject:
      if (parent.phase == kObjKey) {
        parent.lo = child.lo;
        if (child.lo != kAdditionalKey) parent.mask |= uint64_t{1} << child.lo;
        parent.phase = kObjColon;
      } else {
        parent.phase = kObjAfter;
      }
      break;
    case FrameType::kArray:
      ++parent.count;
      parent.phase = kArrAfter;
      break;
    default:
      break;
  }
}

enum class Fed : uint8_t { kOk, kReject, kFork };

// Feeds c to the thread in s until a frame consumes it. kFork: a union's value starts
// with c (*fork_node); the caller tries each alternative.
Fed feed(const Grammar& g, Stack& s, int c, int32_t* fork_node) {
  for (;;) {
    int32_t node = kNoNode;
    const Act a = feed_top(g, s, c, &node);
    switch (a) {
      case Act::kReject:
        return Fed::kReject;
      case Act::kConsumed:
        return Fed::kOk;
      case Act::kPopRefeed:
      case Act::kPopConsumed:
        --s.n;  // the root never pops, so a parent is there
        child_done(s.top(), s.f[s.n]);
        if (a == Act::kPopConsumed) return Fed::kOk;
        break;
      case Act::kStartValue:
        if (s.n + g.nodes[node].need > kMaxDepth) return Fed::kReject;
        if (g.nodes[node].kind == NodeKind::kUnion) {
          *fork_node = node;
          return Fed::kFork;
        }
        if (s.n >= s.cap) return Fed::kReject;
        s.f[s.n++] = value_frame(g, node);
        break;
    }
  }
}

// Adds the thread written at out's free end (n frames) unless an equal one is there.
void commit(State* out, int n) {
  const int base = out->begin[out->n_threads];
  for (int t = 0; t < out->n_threads; ++t) {
    if (out->depth(t) == n &&
        std::memcmp(out->thread(t), out->frames.data() + base, sizeof(Frame) * n) == 0) {
      return;
    }
  }
  out->begin[++out->n_threads] = static_cast<uint16_t>(base + n);
}

// Room for a new thread at out's free end: a stack to write, or false when full.
bool new_thread(State* out, int depth, Stack* s) {
  if (out->n_threads >= kMaxThreads) return false;
  const int base = out->begin[out->n_threads];
  const int cap = std::min(kMaxDepth, kMaxFrames - base);
  if (depth + 1 > cap) return false;
  *s = Stack{out->frames.data() + base, depth, cap};
  return true;
}

void fork(const Grammar& g, const Frame* saved, int depth, int32_t union_node, int c, State* out) {
  for (int32_t alt : g.nodes[union_node].alternatives) {
    Stack s{};
    if (depth + g.nodes[alt].need > kMaxDepth || !new_thread(out, depth, &s)) continue;
    std::memcpy(s.f, saved, sizeof(Frame) * depth);
    s.f[s.n++] = value_frame(g, alt);
    int32_t again = kNoNode;
    if (feed(g, s, c, &again) == Fed::kOk) commit(out, s.n);  // a value's first byte forks once
  }
}

}  // namespace

void initial_state(const Grammar& g, int32_t root, State* out) {
  Frame f;
  f.node = root;
  f.type = FrameType::kRoot;
  out->n_threads = 1;
  out->begin[0] = 0;
  out->begin[1] = 1;
  out->frames[0] = f;
}

bool step(const Grammar& g, const State& in, int c, State* out) {
  out->n_threads = 0;
  out->begin[0] = 0;
  for (int t = 0; t < in.n_threads; ++t) {
    const int depth = in.depth(t);
    Stack s{};
    if (!new_thread(out, depth, &s)) break;
    std::memcpy(s.f, in.thread(t), sizeof(Frame) * depth);
    int32_t union_node = kNoNode;
    const Fed r = feed(g, s, c, &union_node);
    if (r == Fed::kOk) {
      commit(out, s.n);
    } else if (r == Fed::kFork) {
      std::array<Frame, kMaxDepth> saved;
      std::memcpy(saved.data(), s.f, sizeof(Frame) * s.n);
      fork(g, saved.data(), s.n, union_node, c, out);
    }
  }
  return out->n_threads > 0;
}

bool accepts_end(const Grammar& g, const State& s, State* scratch) {
  return step(g, s, kEndOfInput, scratch);
}

bool can_continue(const Grammar& g, const State& s, State* scratch) {
  for (int c = 0; c < 256; ++c) {
    if (step(g, s, c, scratch)) return true;
  }
  return false;
}

bool step_bytes(const Grammar& g, const State& s, std::string_view bytes, State* a, State* b,
                const State** out) {
  const State* cur = &s;
  State* next = a;
  for (char ch : bytes) {
    if (!step(g, *cur, static_cast<uint8_t>(ch), next)) return false;
    cur = next;
    next = next == a ? b : a;
  }
  *out = cur;
  return true;
}

bool accepts_document(const Grammar& g, std::string_view text) {
  State start, a, b;
  initial_state(g, g.root, &start);
  const State* after = nullptr;
  if (!step_bytes(g, start, text, &a, &b, &after)) return false;
  State scratch;
  return accepts_end(g, *after, &scratch);
}

bool string_tops(const Grammar& g, const State& s, std::array<StringTop, kMaxThreads>* out) {
  for (int t = 0; t < s.n_threads; ++t) {
    const Frame& f = s.top(t);
    StringTop& top = (*out)[t];
    top.sub = static_cast<StrSub>(f.sub);
    if (f.type == FrameType::kString && f.phase == kStrIn) {
      top.key = false;
      const uint32_t max = g.nodes[f.node].max_length;
      top.room = max == kUnbounded ? kUnbounded : max - f.count;
    } else if (f.type == FrameType::kKey && f.flags != 0) {
      top.key = true;
      top.room = kUnbounded;
    } else {
      return false;
    }
  }
  return s.n_threads > 0;
}

}  // namespace hypura::grammar
