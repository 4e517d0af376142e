//===- AllocationPlanTest.cpp - Planned places of a run's blocks ----------===//
//
// Decision 86: plans made from traces (offsets, region size, which slots
// share bytes), the planner's bounded replanning, and the caching
// allocator's planned runs (places, strays, conflicts, a region outliving
// its run).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Runtime/AllocationPlan.h"
#include "dynafuse/Runtime/CachingAllocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

using namespace dynafuse;

namespace {

constexpr size_t MiB = size_t(1) << 20;

AllocationEvent allocate(uint32_t index, size_t bytes) {
  return {AllocationEvent::Kind::Allocate, index, bytes};
}
AllocationEvent release(uint32_t index) {
  return {AllocationEvent::Kind::Release, index, 0};
}

/// The chain of decision 81's test: 8, 2, 6, 2 and 4 MiB, each released
/// after the next is made; the last outlives the run.
std::vector<AllocationEvent> chainTrace() {
  return {allocate(0, 8 * MiB), allocate(1, 2 * MiB), release(0),
          allocate(2, 6 * MiB), release(1),           allocate(3, 2 * MiB),
          release(2),           allocate(4, 4 * MiB), release(3)};
}

std::shared_ptr<const AllocationPlan> chainPlan() {
  return std::make_shared<const AllocationPlan>(
      AllocationPlan::fromTrace(chainTrace()));
}

struct Span {
  size_t allocated, released;
};

/// Each index's event positions (released: the trace's length if never).
std::vector<Span> spansOf(const std::vector<AllocationEvent> &trace) {
  std::vector<Span> spans;
  for (size_t position = 0; position < trace.size(); ++position) {
    const AllocationEvent &event = trace[position];
    if (event.index >= spans.size())
      spans.resize(event.index + 1, {0, trace.size()});
    if (event.kind == AllocationEvent::Kind::Allocate)
      spans[event.index].allocated = position;
    else
      spans[event.index].released = position;
  }
  return spans;
}

/// What a block reserves beyond its bytes (its stagger's room).
size_t padOf(size_t bytes) {
  return bytes >= AllocationPlan::kStaggeredMinBytes
             ? AllocationPlan::kStaggerPadBytes
             : 0;
}

bool bytesOverlap(const AllocationPlan::Slot &a,
                  const AllocationPlan::Slot &b) {
  return a.offset < b.offset + int64_t(b.bytes) &&
         b.offset < a.offset + int64_t(a.bytes);
}

/// Checks what every plan must satisfy against its trace.
void expectValidPlan(const std::vector<AllocationEvent> &trace,
                     const AllocationPlan &plan) {
  std::vector<Span> spans = spansOf(trace);
  ASSERT_EQ(plan.slots.size(), spans.size());
  size_t sum = 0;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    const AllocationPlan::Slot &slot = plan.slots[i];
    bool outlives = spans[i].released == trace.size();
    EXPECT_EQ(slot.offset < 0, outlives) << "slot " << i;
    if (slot.offset < 0)
      continue;
    sum += slot.bytes + padOf(slot.bytes);
    EXPECT_EQ(slot.offset % 64, 0) << "slot " << i << " off a cache line";
    EXPECT_LE(size_t(slot.offset) + slot.bytes, plan.regionBytes);
    for (size_t j = 0; j < plan.slots.size(); ++j) {
      const AllocationPlan::Slot &other = plan.slots[j];
      if (j == i || other.offset < 0)
        continue;
      bool together = spans[i].allocated < spans[j].released &&
                      spans[j].allocated < spans[i].released;
      bool sharing = bytesOverlap(slot, other);
      EXPECT_FALSE(together && sharing)
          << "slots " << i << " and " << j << " are live at once";
      bool listed = std::count(slot.sharing.begin(), slot.sharing.end(),
                               uint32_t(j)) == 1;
      EXPECT_EQ(listed, sharing) << "slot " << i << " lists " << j;
    }
  }
  EXPECT_GE(plan.regionBytes, plan.peakLiveBytes);
  EXPECT_LE(plan.regionBytes, sum);
}

} // namespace

TEST(AllocationPlan, ChainFitsInItsPeakOfLiveBytes) {
  std::vector<AllocationEvent> trace = chainTrace();
  AllocationPlan plan = AllocationPlan::fromTrace(trace);
  expectValidPlan(trace, plan);
  EXPECT_EQ(plan.peakLiveBytes, 10 * MiB) << "8 + 2 live at once";
  EXPECT_EQ(plan.regionBytes, 10 * MiB + 2 * AllocationPlan::kStaggerPadBytes);
  EXPECT_EQ(plan.plannedSlots(), 4u);
  EXPECT_EQ(plan.slots[4].offset, -1) << "the output outlives the run";
  EXPECT_EQ(plan.slots[4].bytes, 4 * MiB);
  // The 6 MiB block lies in the 8 MiB one's place, which had died.
  EXPECT_TRUE(bytesOverlap(plan.slots[0], plan.slots[2]));
}

TEST(AllocationPlan, RandomTracesGiveValidPlans) {
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<AllocationEvent> trace;
    std::vector<uint32_t> live;
    uint32_t next = 0;
    int steps = 1 + int(random() % 60);
    for (int step = 0; step < steps; ++step) {
      if (!live.empty() && random() % 2) {
        size_t pick = random() % live.size();
        trace.push_back(release(live[pick]));
        live.erase(live.begin() + long(pick));
      } else {
        size_t pages = 1 + random() % 64;
        trace.push_back(allocate(next, pages * 4096));
        live.push_back(next++);
      }
    }
    AllocationPlan plan = AllocationPlan::fromTrace(trace);
    expectValidPlan(trace, plan);
    // Best fit by size stays near the lower bound on these traces.
    EXPECT_LE(plan.regionBytes, 2 * plan.peakLiveBytes + 64 * 4096);
  }
}

TEST(AllocationPlan, LargeBlocksLiveAtOnceStartAtDistinctPageOffsets) {
  // 16 blocks of 256 KiB live at once (a backward kernel's streams):
  // placed back to back they would all start at offset 0 modulo the page.
  std::vector<AllocationEvent> trace;
  for (uint32_t i = 0; i < 16; ++i)
    trace.push_back(allocate(i, 256 << 10));
  for (uint32_t i = 0; i < 16; ++i)
    trace.push_back(release(i));
  AllocationPlan plan = AllocationPlan::fromTrace(trace);
  expectValidPlan(trace, plan);
  std::set<int64_t> pageOffsets;
  for (const AllocationPlan::Slot &slot : plan.slots)
    pageOffsets.insert(slot.offset % 4096);
  EXPECT_EQ(pageOffsets.size(), 16u);
  // Small blocks are packed as they come.
  AllocationPlan small = AllocationPlan::fromTrace(
      {allocate(0, 4096), allocate(1, 4096), release(0), release(1)});
  EXPECT_EQ(small.regionBytes, 8192u);
}

TEST(AllocationPlan, MalformedTracesPlanNothing) {
  std::vector<std::vector<AllocationEvent>> malformed = {
      {allocate(0, MiB), allocate(0, MiB), release(0)}, // allocated twice
      {release(0), allocate(0, MiB)},                   // released first
      {allocate(0, MiB), release(0), release(0)},       // released twice
      {allocate(1, MiB), release(1)},                   // index 0 missing
      {allocate(AllocationPlan::kMaxSlots, MiB)},       // too many
  };
  for (const auto &trace : malformed)
    EXPECT_EQ(AllocationPlan::fromTrace(trace).plannedSlots(), 0u);
}

TEST(AllocationPlan, PlannerReplansOnlyAfterAStrayBoundedTimes) {
  AllocationPlanner planner;
  EXPECT_EQ(planner.current(), nullptr);
  RunOutcome first;
  first.trace = chainTrace();
  EXPECT_TRUE(planner.learn(first)) << "a run without a plan makes one";
  std::shared_ptr<const AllocationPlan> plan = planner.current();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->regionBytes, 10 * MiB + 2 * AllocationPlan::kStaggerPadBytes);
  RunOutcome followed;
  followed.followedPlan = true;
  EXPECT_FALSE(planner.learn(followed));
  EXPECT_EQ(planner.current(), plan);
  RunOutcome strayed;
  strayed.trace = {allocate(0, MiB), release(0)};
  for (int k = 1; k < AllocationPlanner::kMaxPlans; ++k)
    EXPECT_TRUE(planner.learn(strayed));
  EXPECT_EQ(planner.current()->regionBytes,
            MiB + AllocationPlan::kStaggerPadBytes);
  EXPECT_FALSE(planner.learn(first)) << "at the bound the last plan stays";
  EXPECT_EQ(planner.plansMade(), AllocationPlanner::kMaxPlans);
  EXPECT_EQ(planner.current()->regionBytes,
            MiB + AllocationPlan::kStaggerPadBytes);
}

namespace {

/// Runs the chain of chainTrace() with the allocator; returns the blocks
/// (index 4, the output, still allocated) and writes each block's index
/// into its bytes while it lives, checking the earlier ones kept theirs.
std::vector<char *> runChain(CachingAllocator &allocator,
                             RunAllocations *run) {
  const size_t sizes[] = {8 * MiB, 2 * MiB, 6 * MiB, 2 * MiB, 4 * MiB};
  std::vector<char *> blocks(5, nullptr);
  for (size_t i = 0; i < 5; ++i) {
    blocks[i] = static_cast<char *>(allocator.allocate(sizes[i], run));
    std::memset(blocks[i], int(i + 1), sizes[i]);
    if (i > 0) {
      EXPECT_EQ(blocks[i - 1][0], char(i)) << "block " << i - 1;
      EXPECT_EQ(blocks[i - 1][sizes[i - 1] - 1], char(i));
      allocator.release(blocks[i - 1]);
    }
  }
  return blocks;
}

} // namespace

TEST(AllocationPlan, RunsFollowingThePlanGetTheirPlaces) {
  CachingAllocator allocator;
  AllocationPlanner planner;
  auto recorded = allocator.beginRun(planner.current());
  std::vector<char *> first = runChain(allocator, recorded.get());
  RunOutcome outcome = allocator.endRun(*recorded);
  EXPECT_FALSE(outcome.followedPlan) << "there was no plan";
  EXPECT_EQ(outcome.trace.size(), chainTrace().size());
  ASSERT_TRUE(planner.learn(outcome));
  allocator.release(first[4]);

  for (int call = 0; call < 3; ++call) {
    auto run = allocator.beginRun(planner.current());
    std::vector<char *> blocks = runChain(allocator, run.get());
    // Blocks 0 and 2 share their start (6 MiB in the 8's place), and the
    // region holds the four planned blocks.
    const AllocationPlan &plan = *planner.current();
    char *region = blocks[0] - plan.slots[0].offset;
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(blocks[i], region + plan.slots[i].offset) << i;
    EXPECT_TRUE(blocks[4] < region ||
                blocks[4] >= region + plan.regionBytes)
        << "the output is a heap block";
    RunOutcome went = allocator.endRun(*run);
    EXPECT_TRUE(went.followedPlan);
    EXPECT_EQ(went.plannedAllocations, 4u);
    EXPECT_FALSE(planner.learn(went));
    allocator.release(blocks[4]);
  }
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.plannedAllocations, 12);
  EXPECT_EQ(stats.planConflicts, 0);
  EXPECT_EQ(stats.bytesInUse, 0u) << "regions go back with their runs";
}

TEST(AllocationPlan, ABlockStillLiveSendsItsSharersToTheHeap) {
  CachingAllocator allocator;
  std::shared_ptr<const AllocationPlan> plan = chainPlan();
  ASSERT_TRUE(bytesOverlap(plan->slots[0], plan->slots[2]));
  auto run = allocator.beginRun(plan);
  // This run keeps block 0 past its planned release.
  char *zero = static_cast<char *>(allocator.allocate(8 * MiB, run.get()));
  char *one = static_cast<char *>(allocator.allocate(2 * MiB, run.get()));
  std::memset(zero, 1, 8 * MiB);
  char *two = static_cast<char *>(allocator.allocate(6 * MiB, run.get()));
  std::memset(two, 3, 6 * MiB);
  EXPECT_TRUE(two + 6 * MiB <= zero || two >= zero + 8 * MiB)
      << "never a block over a live one";
  EXPECT_EQ(zero[0], 1);
  EXPECT_EQ(zero[8 * MiB - 1], 1);
  EXPECT_EQ(allocator.stats().planConflicts, 1);
  for (char *block : {zero, one, two})
    allocator.release(block);
  RunOutcome outcome = allocator.endRun(*run);
  EXPECT_FALSE(outcome.followedPlan);
  EXPECT_EQ(outcome.plannedAllocations, 2u);
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
}

TEST(AllocationPlan, AnotherSizeEndsThePlanForTheRun) {
  CachingAllocator allocator;
  std::shared_ptr<const AllocationPlan> plan = chainPlan();
  auto run = allocator.beginRun(plan);
  void *zero = allocator.allocate(8 * MiB, run.get());
  void *other = allocator.allocate(3 * MiB, run.get()); // the trace had 2
  allocator.release(zero);
  void *two = allocator.allocate(6 * MiB, run.get());
  RunOutcome outcome = allocator.endRun(*run);
  EXPECT_FALSE(outcome.followedPlan);
  EXPECT_EQ(outcome.plannedAllocations, 1u) << "only block 0 was placed";
  ASSERT_EQ(outcome.trace.size(), 4u);
  EXPECT_EQ(outcome.trace[1].bytes, 3 * MiB) << "the trace has this run's";
  allocator.release(other);
  allocator.release(two);
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
}

TEST(AllocationPlan, TheRegionOutlivesItsRunWhileABlockDoes) {
  CachingAllocator allocator;
  std::shared_ptr<const AllocationPlan> plan = chainPlan();
  auto run = allocator.beginRun(plan);
  char *zero = static_cast<char *>(allocator.allocate(8 * MiB, run.get()));
  allocator.endRun(*run);
  run.reset();
  std::memset(zero, 5, 8 * MiB); // still valid memory
  EXPECT_GE(allocator.stats().bytesInUse, plan->regionBytes);
  void *unrelated = allocator.allocate(8 * MiB);
  EXPECT_TRUE(static_cast<char *>(unrelated) + 8 * MiB <= zero ||
              static_cast<char *>(unrelated) >= zero + plan->regionBytes);
  allocator.release(unrelated);
  allocator.release(zero);
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
  // Its range is free again: the same region size fits without growing.
  size_t mapped = allocator.stats().bytesMapped;
  allocator.release(allocator.allocate(plan->regionBytes));
  EXPECT_EQ(allocator.stats().bytesMapped, mapped);
}

TEST(AllocationPlan, SmallBlocksAndGuardPagesAreNotPlanned) {
  CachingAllocator allocator;
  auto run = allocator.beginRun(nullptr);
  void *small = allocator.allocate(4096, run.get());
  allocator.release(small);
  EXPECT_TRUE(allocator.endRun(*run).trace.empty())
      << "blocks under 64 KiB keep their size cache";

  CachingAllocator::Options guarded;
  guarded.guardPages = true;
  CachingAllocator fenced(guarded);
  std::shared_ptr<const AllocationPlan> plan = chainPlan();
  auto fencedRun = fenced.beginRun(plan);
  void *block = fenced.allocate(8 * MiB, fencedRun.get());
  RunOutcome outcome = fenced.endRun(*fencedRun);
  EXPECT_EQ(outcome.plannedAllocations, 0u);
  EXPECT_TRUE(outcome.trace.empty());
  fenced.release(block);
}
