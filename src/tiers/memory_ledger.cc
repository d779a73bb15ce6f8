#include "tiers/memory_ledger.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "common/size.h"

namespace hypura::tiers {
namespace {

constexpr uint64_t kAlignment = 4096;

uint64_t status_field_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t key_len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, key_len, key) == 0)
      return std::strtoull(line.c_str() + key_len, nullptr, 10) << 10;
  }
  return 0;
}

}  // namespace

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kProcess:
      return "process";
    case MemoryKind::kResidentWeights:
      return "resident_weights";
    case MemoryKind::kStreamPool:
      return "stream_pool";
    case MemoryKind::kExpertCache:
      return "expert_cache";
    case MemoryKind::kKvCache:
      return "kv_cache";
    case MemoryKind::kWork:
      return "work_buffers";
  }
  return "?";
}

Reservation::~Reservation() {
  if (ledger_ != nullptr) ledger_->uncharge(kind_, bytes_);
}

Reservation::Reservation(Reservation&& o) noexcept
    : ledger_(std::exchange(o.ledger_, nullptr)),
      kind_(o.kind_),
      bytes_(std::exchange(o.bytes_, 0)) {}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  std::swap(ledger_, o.ledger_);
  std::swap(kind_, o.kind_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

LedgerBuffer::~LedgerBuffer() {
  if (data_ == nullptr) return;
  if (locked_) munlock(data_, size());
  std::free(data_);
}

LedgerBuffer::LedgerBuffer(LedgerBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      charge_(std::move(o.charge_)),
      locked_(std::exchange(o.locked_, false)) {}

LedgerBuffer& LedgerBuffer::operator=(LedgerBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(charge_, o.charge_);
  std::swap(locked_, o.locked_);
  return *this;
}

bool LedgerBuffer::lock() {
  if (locked_ || data_ == nullptr) return locked_;
  rlimit lim{};
  const bool allowed = getrlimit(RLIMIT_MEMLOCK, &lim) == 0 &&
                       (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= size());
  // Root may exceed the rlimit; everyone else would just get EPERM/ENOMEM.
  if ((allowed || geteuid() == 0) && mlock(data_, size()) == 0) {
    locked_ = true;
  } else {
    static bool warned = false;
    if (!warned) {
      spdlog::info("weights not locked in memory (RLIMIT_MEMLOCK too low: {})",
                   std::strerror(errno));
      warned = true;
    }
  }
  return locked_;
}

Result<Reservation> MemoryLedger::reserve(MemoryKind kind, uint64_t bytes,
                                          const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (budget_ != 0 && used_ + bytes > budget_) {
    return resource_exhausted("memory budget exceeded: " + what + " needs " + format_size(bytes) +
                              " but " + format_size(used_) + " of the " + format_size(budget_) +
                              " budget is already held");
  }
  used_ += bytes;
  by_kind_[static_cast<int>(kind)] += bytes;
  peak_ = std::max(peak_, used_);
  return Reservation(this, kind, bytes);
}

Result<LedgerBuffer> MemoryLedger::allocate(MemoryKind kind, uint64_t bytes,
                                            const std::string& what) {
  HYPURA_ASSIGN_OR_RETURN(Reservation charge, reserve(kind, bytes, what));
  LedgerBuffer buffer;
  if (bytes == 0) return buffer;
  void* p = nullptr;
  const uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (posix_memalign(&p, kAlignment, rounded) != 0) {
    return resource_exhausted("cannot allocate " + format_size(bytes) + " for " + what);
  }
  // Large pages cut TLB misses when the matmuls sweep through gigabytes of weights.
  madvise(p, rounded, MADV_HUGEPAGE);
  buffer.data_ = static_cast<uint8_t*>(p);
  buffer.charge_ = std::move(charge);
  return buffer;
}

void MemoryLedger::uncharge(MemoryKind kind, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= bytes;
  by_kind_[static_cast<int>(kind)] -= bytes;
}

uint64_t MemoryLedger::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

uint64_t MemoryLedger::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (budget_ == 0) return std::numeric_limits<uint64_t>::max();
  return budget_ > used_ ? budget_ - used_ : 0;
}

LedgerSnapshot MemoryLedger::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LedgerSnapshot{budget_, used_, peak_, by_kind_};
}

std::string MemoryLedger::summary() const {
  const LedgerSnapshot s = snapshot();
  std::string out = "used ";
  out.append(format_size(s.used));
  out.append(" of ");
  out.append(s.budget == 0 ? std::string("no budget") : format_size(s.budget));
  out.append(" (peak ");
  out.append(format_size(s.peak));
  out.append(")");
  const char* sep = ": ";
  for (int k = 0; k < kMemoryKinds; ++k) {
    if (s.by_kind[k] == 0) continue;
    out.append(sep);
    out.append(memory_kind_name(static_cast<MemoryKind>(k)));
    out.append(" ");
    out.append(format_size(s.by_kind[k]));
    sep = ", ";
  }
  return out;
}

uint64_t current_rss_bytes() {
  return status_field_bytes("VmRSS:");
}
uint64_t peak_rss_bytes() {
  return status_field_bytes("VmHWM:");
}

}  // namespace hypura::tiers
