// MemoryLedger: the one account of every large allocation of a loaded model.
//
// Resident weights, the streaming pool, expert caches, the KV cache and the forward
// pass's work buffers are all charged here before they exist, and a charge that would
// take the total past the budget is refused with a message naming what asked and what is
// already held. So "peak RSS within the budget" follows from the design: nothing big is
// allocated behind the ledger's back. The process's own baseline (code, heap of the
// tokenizer and GGUF directory) is charged once as kProcess.
//
// Two ways to charge:
//   allocate(kind, bytes, what)  the ledger allocates aligned memory and owns it
//                                (LedgerBuffer frees and uncharges on destruction);
//   reserve(kind, bytes, what)   accounting only, for memory another component allocates
//                                itself (KvCache, Forward scratch): the caller states the
//                                size it will allocate; Reservation uncharges on destruction.
//
// Thread-safety: all methods may be called from any thread (one mutex). The ledger must
// outlive every LedgerBuffer and Reservation it handed out.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"

namespace hypura::tiers {

enum class MemoryKind { kProcess, kResidentWeights, kStreamPool, kExpertCache, kKvCache, kWork };
inline constexpr int kMemoryKinds = 6;
const char* memory_kind_name(MemoryKind kind);  // "process", "resident_weights", ...

class MemoryLedger;

// A charge without memory. Move-only; uncharges on destruction.
class Reservation {
 public:
  Reservation() = default;
  ~Reservation();
  Reservation(Reservation&& o) noexcept;
  Reservation& operator=(Reservation&& o) noexcept;
  uint64_t bytes() const { return bytes_; }

 private:
  friend class MemoryLedger;
  Reservation(MemoryLedger* ledger, MemoryKind kind, uint64_t bytes)
      : ledger_(ledger), kind_(kind), bytes_(bytes) {}
  MemoryLedger* ledger_ = nullptr;
  MemoryKind kind_ = MemoryKind::kWork;
  uint64_t bytes_ = 0;
};

// Charged, aligned (4096-byte, as O_DIRECT needs), zero-initialised memory. Move-only.
class LedgerBuffer {
 public:
  LedgerBuffer() = default;
  ~LedgerBuffer();
  LedgerBuffer(LedgerBuffer&& o) noexcept;
  LedgerBuffer& operator=(LedgerBuffer&& o) noexcept;
  uint8_t* data() const { return data_; }
  uint64_t size() const { return charge_.bytes(); }
  // Pins the pages (mlock) when RLIMIT_MEMLOCK allows; false (logged once) otherwise.
  bool lock();
  bool locked() const { return locked_; }

 private:
  friend class MemoryLedger;
  uint8_t* data_ = nullptr;
  Reservation charge_;
  bool locked_ = false;
};

struct LedgerSnapshot {
  uint64_t budget = 0;  // 0: unlimited
  uint64_t used = 0;
  uint64_t peak = 0;
  std::array<uint64_t, kMemoryKinds> by_kind{};  // current charge per MemoryKind
};

class MemoryLedger {
 public:
  // budget_bytes 0 means unlimited (charges are still counted).
  explicit MemoryLedger(uint64_t budget_bytes) : budget_(budget_bytes) {}
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // kResourceExhausted when used() + bytes > budget; `what` appears in the message.
  Result<Reservation> reserve(MemoryKind kind, uint64_t bytes, const std::string& what);
  Result<LedgerBuffer> allocate(MemoryKind kind, uint64_t bytes, const std::string& what);

  uint64_t budget() const { return budget_; }
  uint64_t used() const;
  uint64_t available() const;  // budget - used (UINT64_MAX when unlimited)
  LedgerSnapshot snapshot() const;
  // One line: "used 2.1 GiB of 3.0 GiB (peak 2.2 GiB): resident_weights 1.4 GiB, ...".
  std::string summary() const;

 private:
  friend class Reservation;
  void uncharge(MemoryKind kind, uint64_t bytes);

  const uint64_t budget_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  std::array<uint64_t, kMemoryKinds> by_kind_{};
};

// Resident set size of this process now and its high-water mark (VmRSS, VmHWM of
// /proc/self/status), in bytes; 0 when unreadable.
uint64_t current_rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace hypura::tiers
