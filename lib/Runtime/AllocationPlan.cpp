//===- AllocationPlan.cpp - Where a compiled run's blocks go, planned -----===//
#include "dynafuse/Runtime/AllocationPlan.h"

#include <algorithm>
#include <limits>

namespace dynafuse {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

/// Blocks this large start at staggered offsets modulo the page: placed
/// at multiples of their (page-multiple) sizes, the streams a kernel reads
/// and writes would all lie at one offset modulo 4 KiB, where the L1
/// cache's loads alias the stores before them (a backward kernel of 27
/// such streams ran at a tenth of the bandwidth: decision 141). Each gets
/// a page more than its bytes and starts at the k-th of 64 cache-line
/// offsets inside it, k spread over the blocks in allocation order.
constexpr size_t kStaggeredMinBytes = AllocationPlan::kStaggeredMinBytes;
constexpr size_t kPageBytes = AllocationPlan::kStaggerPadBytes;
constexpr size_t kLineBytes = 64;

size_t staggerOf(size_t largeRank) {
  return (largeRank * 23 % (kPageBytes / kLineBytes)) * kLineBytes;
}

/// A block of the trace: its size and the event positions bounding its
/// lifetime (released at kNever: it outlived the run).
struct Lifetime {
  size_t bytes = 0;
  size_t allocated = kNever;
  size_t released = kNever;
  bool overlaps(const Lifetime &other) const {
    return allocated < other.released && other.allocated < released;
  }
};

/// The lifetimes of the trace's allocations by index; empty when the trace
/// is malformed (an index allocated twice, released before allocated or
/// twice, or beyond kMaxSlots).
std::vector<Lifetime> lifetimesOf(const std::vector<AllocationEvent> &trace) {
  std::vector<Lifetime> blocks;
  for (size_t position = 0; position < trace.size(); ++position) {
    const AllocationEvent &event = trace[position];
    if (event.index >= AllocationPlan::kMaxSlots)
      return {};
    if (event.index >= blocks.size())
      blocks.resize(event.index + 1);
    Lifetime &block = blocks[event.index];
    if (event.kind == AllocationEvent::Kind::Allocate) {
      if (block.allocated != kNever)
        return {};
      block.allocated = position;
      block.bytes = event.bytes;
    } else {
      if (block.allocated == kNever || block.released != kNever)
        return {};
      block.released = position;
    }
  }
  for (const Lifetime &block : blocks)
    if (block.allocated == kNever) // an index never allocated
      return {};
  return blocks;
}

/// The offset for `bytes` among `placed` (offset, end) ranges sorted by
/// offset: the smallest gap that holds it, else above them all.
size_t bestFit(const std::vector<std::pair<size_t, size_t>> &placed,
               size_t bytes) {
  size_t best = kNever, bestGap = kNever, cursor = 0;
  for (const auto &[offset, end] : placed) {
    if (offset > cursor) {
      size_t gap = offset - cursor;
      if (gap >= bytes && gap < bestGap) {
        best = cursor;
        bestGap = gap;
      }
    }
    cursor = std::max(cursor, end);
  }
  return best != kNever ? best : cursor;
}

} // namespace

size_t AllocationPlan::plannedSlots() const {
  return size_t(std::count_if(slots.begin(), slots.end(),
                              [](const Slot &slot) { return slot.offset >= 0; }));
}

AllocationPlan
AllocationPlan::fromTrace(const std::vector<AllocationEvent> &trace) {
  AllocationPlan plan;
  std::vector<Lifetime> blocks = lifetimesOf(trace);
  if (blocks.empty())
    return plan; // malformed or empty: nothing planned
  plan.slots.resize(blocks.size());
  std::vector<uint32_t> order;
  // Per block: the bytes it reserves, and where its bytes start in them.
  std::vector<size_t> reserved(blocks.size()), stagger(blocks.size(), 0);
  size_t largeRank = 0;
  for (uint32_t i = 0; i < blocks.size(); ++i) {
    plan.slots[i].bytes = blocks[i].bytes;
    reserved[i] = blocks[i].bytes;
    if (blocks[i].released == kNever)
      continue;
    order.push_back(i);
    if (blocks[i].bytes >= kStaggeredMinBytes) {
      size_t lines = (blocks[i].bytes + kLineBytes - 1) / kLineBytes;
      reserved[i] = lines * kLineBytes + kPageBytes;
      stagger[i] = staggerOf(largeRank++);
    }
  }
  // Largest first; of equal sizes, the earlier allocated first.
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (blocks[a].bytes != blocks[b].bytes)
      return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].allocated < blocks[b].allocated;
  });
  std::vector<uint32_t> placedSoFar;
  for (uint32_t index : order) {
    std::vector<std::pair<size_t, size_t>> placed;
    for (uint32_t other : placedSoFar)
      if (blocks[other].overlaps(blocks[index])) {
        size_t start = size_t(plan.slots[other].offset) - stagger[other];
        placed.push_back({start, start + reserved[other]});
      }
    std::sort(placed.begin(), placed.end());
    size_t offset = bestFit(placed, reserved[index]);
    plan.slots[index].offset = int64_t(offset + stagger[index]);
    plan.regionBytes = std::max(plan.regionBytes, offset + reserved[index]);
    placedSoFar.push_back(index);
  }
  // The slots sharing bytes (necessarily at disjoint times).
  for (size_t a = 0; a < placedSoFar.size(); ++a)
    for (size_t b = a + 1; b < placedSoFar.size(); ++b) {
      Slot &first = plan.slots[placedSoFar[a]];
      Slot &second = plan.slots[placedSoFar[b]];
      if (first.offset < second.offset + int64_t(second.bytes) &&
          second.offset < first.offset + int64_t(first.bytes)) {
        first.sharing.push_back(placedSoFar[b]);
        second.sharing.push_back(placedSoFar[a]);
      }
    }
  // The most planned bytes live at once.
  size_t live = 0;
  for (const AllocationEvent &event : trace) {
    const Lifetime &block = blocks[event.index];
    if (block.released == kNever)
      continue;
    if (event.kind == AllocationEvent::Kind::Allocate) {
      live += block.bytes;
      plan.peakLiveBytes = std::max(plan.peakLiveBytes, live);
    } else {
      live -= block.bytes;
    }
  }
  return plan;
}

std::shared_ptr<const AllocationPlan> AllocationPlanner::current() const {
  std::lock_guard<std::mutex> lock(mutex);
  return plan;
}

bool AllocationPlanner::learn(const RunOutcome &outcome) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (outcome.followedPlan || made >= kMaxPlans)
      return false;
    ++made;
  }
  auto next = std::make_shared<const AllocationPlan>(
      AllocationPlan::fromTrace(outcome.trace));
  std::lock_guard<std::mutex> lock(mutex);
  plan = std::move(next);
  return true;
}

int AllocationPlanner::plansMade() const {
  std::lock_guard<std::mutex> lock(mutex);
  return made;
}

} // namespace dynafuse
