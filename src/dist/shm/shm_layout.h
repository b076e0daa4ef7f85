// The layout of a rank's shared-memory segment, which the step engine
// (shm_engine.cc) and the point-to-point rings (shm_transport.cc) both read:
// a header (step boxes, liveness, revoke), two data slots, then one byte
// ring per peer. Internal to src/dist/shm.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dist/shm/shm_engine.h"

namespace sinew::dist {

constexpr size_t kAlign = 4096;  // segments and slots start on a page
inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// One per step parity: the step number, the descriptor and a small payload
// share the first cache line.
struct alignas(128) Box {  // 128: the adjacent-line prefetcher pairs lines
  std::atomic<uint64_t> step;
  OpDesc desc;
  uint8_t data[ShmEngine::kInlineBytes];
};
static_assert(sizeof(Box) == 128, "fast box is two cache lines");
static_assert(offsetof(Box, data) + 16 <= 64, "step, descriptor and 16 payload bytes share a line");

struct ShmEngine::Header {
  uint64_t magic;
  int32_t pid;
  int32_t size;
  uint64_t slot_bytes;
  uint64_t ring_bytes;
  std::atomic<uint32_t> revoked;   // read-mostly: every wait glances at it
  std::atomic<uint32_t> departed;  // set once, when the rank destroys its group
  alignas(64) std::atomic<uint64_t> heartbeat;
  alignas(64) std::atomic<uint64_t> failed[ShmEngine::kMaxTrackedRanks / 64];
  Box box[2];
};

struct ShmEngine::Ring {
  alignas(64) std::atomic<uint64_t> head;  // bytes written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the consumer
  alignas(64) uint8_t data[1];
};

// A wait that went through check_progress ends with one more clock read
// for the Flight Recorder's completion stamps.
void note_wait_over();

}  // namespace sinew::dist
