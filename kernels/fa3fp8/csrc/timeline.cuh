// An instrument's switch (-DFA3FP8_TIMELINE=1, off): attn_fwd records the SM's clock at a few points of each work
// item, per CTA and warpgroup, into a buffer that benchmarks/timeline.py hands the library (fa3fp8_timeline) and
// reads back: how long a work tile waits for Q, runs its first Q·Kᵀ, its loop and its epilogue, and the gap before
// the next one. The default build has none of it (its kernels' SASS is the same with or without this file).
#pragma once

#include <stdint.h>

#ifndef FA3FP8_TIMELINE
#define FA3FP8_TIMELINE 0
#endif

namespace fa3fp8 {

constexpr bool TIMELINE = FA3FP8_TIMELINE;

// A record per CTA and warpgroup (role 0 the producer, 1.. the consumers) of TIMELINE_WORDS 64-bit words: the
// globaltimer (ns) and clock64 at the warpgroup's start, then at its end, the SM's index, then TIMELINE_EVENTS words
// for each of its first TIMELINE_ITEMS work items. benchmarks/timeline.py reads these numbers from this file.
constexpr int TIMELINE_ROLES = 4;
constexpr int TIMELINE_HEADER = 5;
constexpr int TIMELINE_ITEMS = 32;
constexpr int TIMELINE_EVENTS = 6;
constexpr int TIMELINE_WORDS = TIMELINE_HEADER + TIMELINE_ITEMS * TIMELINE_EVENTS;

// A work item's words: clock64 at its top (its work tile looked up), once Q has landed (the producer: once Q's copy
// is issued), once its first Q·Kᵀ is in registers (the serial loop: at its start; the producer: its first K/V
// tile's copies issued), after its last P·V (the producer: every copy issued) and at its end (consumers); then
// INFO, the item's index w in the high half and in the low half the key tiles computed, bit 31 set for a tail
// split's segment.
enum TimelineEvent : int { EV_TOP = 0, EV_Q = 1, EV_FIRST = 2, EV_LOOP = 3, EV_END = 4, EV_INFO = 5 };

// Where the records go: `ctas` CTAs' records (CTAs past them record nothing); null records: none recorded
struct Timeline {
  uint64_t* records;
  int ctas;
};

#if FA3FP8_TIMELINE
// the buffer every launch hands its kernel (fa3fp8_timeline sets it; hidden: two builds in one process keep theirs)
extern Timeline timeline __attribute__((visibility("hidden")));
#endif

// word `word` of this CTA's record for warpgroup `role` <- value, where the record exists
__device__ __forceinline__ void timeline_put(const Timeline& t, int role, int word, uint64_t value) {
  if (t.records != nullptr && blockIdx.x < t.ctas)
    t.records[((size_t)blockIdx.x * TIMELINE_ROLES + role) * TIMELINE_WORDS + word] = value;
}

// word `event` of work item `item` <- value, for the first TIMELINE_ITEMS items
__device__ __forceinline__ void timeline_item(const Timeline& t, int role, int item, int event, uint64_t value) {
  if (item < TIMELINE_ITEMS) timeline_put(t, role, TIMELINE_HEADER + item * TIMELINE_EVENTS + event, value);
}

// the clock at event `event` of work item `item`
__device__ __forceinline__ void timeline_mark(const Timeline& t, int role, int item, int event) {
  timeline_item(t, role, item, event, clock64());
}

__device__ __forceinline__ void timeline_info(const Timeline& t, int role, int item, int w, int key_tiles,
                                              bool segment) {
  const uint64_t low = (uint32_t)key_tiles | (segment ? 1u << 31 : 0u);
  timeline_item(t, role, item, EV_INFO, (uint64_t)(uint32_t)w << 32 | low);
}

// the globaltimer and the clock at the warpgroup's start (end false) or end, and the SM's index
__device__ __forceinline__ void timeline_edge(const Timeline& t, int role, bool end) {
  uint64_t ns;
  uint32_t sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  timeline_put(t, role, 2 * end, ns);
  timeline_put(t, role, 2 * end + 1, clock64());
  timeline_put(t, role, 4, sm);
}

// What attn_fwd calls, with its Params (whose `timeline` member only a TIMELINE build has), each under `if constexpr
// (TIMELINE)`: as calls of functions that do nothing, their arguments' uses of the kernel's counters renumbered its PTX
// registers, and ptxas scheduled four FP8 d128 kernels anew. `writer`: the warpgroup's one thread that records.
template <class P>
__device__ __forceinline__ void record_event(const P& p, bool writer, int role, int item, int event) {
  if (writer) timeline_mark(p.timeline, role, item, event);
}
template <class P>
__device__ __forceinline__ void record_info(const P& p, bool writer, int role, int item, int w, int key_tiles,
                                            bool segment) {
  if (writer) timeline_info(p.timeline, role, item, w, key_tiles, segment);
}
template <class P>
__device__ __forceinline__ void record_edge(const P& p, bool writer, int role, bool end) {
  if (writer) timeline_edge(p.timeline, role, end);
}

}  // namespace fa3fp8
