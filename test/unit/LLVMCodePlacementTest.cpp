//===- LLVMCodePlacementTest.cpp - Kernel code far from its constants -----===//
//
// Regression test. Kernels use the small code model: code reaches its
// constant pool with 32-bit PC-relative offsets, so one object's sections
// must lie within 2 GiB of each other. RuntimeDyld's SectionMemoryManager
// mapped code and read-only data separately, wherever the kernel put them,
// and truncated offsets that did not fit (LLVM checks them only in assert
// builds): in a fragmented address space a kernel then loaded its constants
// from an unmapped address (flaky segfaults in large models; deterministic
// under DYNAFUSE_GUARD_PAGES, whose many small mappings fragment it).
//
// The test fragments the address space on purpose: a 6 GiB reservation
// below the existing mappings keeps only one-page holes at its top, and
// every gap above it is filled. A one-page mapping then lands in a hole
// and anything larger more than 6 GiB lower. The module's code takes more
// than a page and its constants less than one.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <unistd.h>

using namespace dynafuse;

namespace {

/// Address-space reservations (PROT_NONE, no memory), unmapped on
/// destruction.
class Reservations {
public:
  ~Reservations() {
    for (auto &range : ranges)
      munmap(reinterpret_cast<void *>(range.first), range.second);
  }
  /// Reserves [start, start + length) if it is free; false otherwise.
  bool reserveAt(uintptr_t start, size_t length) {
    void *at =
        mmap(reinterpret_cast<void *>(start), length, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
             -1, 0);
    if (at == MAP_FAILED)
      return false;
    if (uintptr_t(at) != start) { // A kernel without MAP_FIXED_NOREPLACE.
      munmap(at, length);
      return false;
    }
    ranges.push_back({start, length});
    return true;
  }
  /// Reserves `length` bytes wherever the kernel places them.
  uintptr_t reserve(size_t length) {
    void *at = mmap(nullptr, length, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED)
      return 0;
    ranges.push_back({uintptr_t(at), length});
    return uintptr_t(at);
  }

private:
  std::vector<std::pair<uintptr_t, size_t>> ranges;
};

/// Reserves 6 GiB below the existing mappings, fills every gap above it
/// (up to the stack, which must stay free to grow) and returns the
/// addresses of one-page holes punched at the top of the reservation.
std::vector<uintptr_t> fragmentAddressSpace(Reservations &reservations) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t span = size_t(6) << 30;
  uintptr_t below = reservations.reserve(span);
  std::vector<uintptr_t> holes;
  if (!below)
    return holes;
  std::ifstream maps("/proc/self/maps");
  std::vector<std::pair<uintptr_t, uintptr_t>> mapped;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, name;
    fields >> range >> perms >> offset >> device >> inode >> name;
    size_t dash = range.find('-');
    uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (name == "[stack]")
      break;
    mapped.push_back({start, end});
  }
  // Large anonymous mappings may be aligned, leaving a gap above this one.
  for (size_t i = 0; i + 1 < mapped.size(); ++i) {
    uintptr_t gapStart = mapped[i].second, gapEnd = mapped[i + 1].first;
    if (gapStart >= below && gapEnd > gapStart)
      reservations.reserveAt(gapStart, gapEnd - gapStart);
  }
  for (int k = 0; k < 16; ++k) {
    uintptr_t hole = below + span - (2 * k + 1) * page;
    if (munmap(reinterpret_cast<void *>(hole), page) == 0)
      holes.push_back(hole);
  }
  return holes;
}

/// A module of several kernels with many float constants each: its code
/// needs more than a page, its constants less.
std::string constantHeavyModule() {
  std::ostringstream text;
  for (int k = 0; k < 6; ++k) {
    text << "kernel @k" << k << "(%x: f32[1000], %out: f32[1000]) {\n"
         << "  for i0 in 0..1000 {\n"
         << "    %0 = load %x[i0] : f32\n"
         << "    %1 = const " << 0.25 + k << " : f32\n"
         << "    %2 = mul %0, %1 : f32\n"
         << "    %3 = tanh %2 : f32\n"
         << "    %4 = const " << 1.5 + k << " : f32\n"
         << "    %5 = mul %3, %4 : f32\n"
         << "    %6 = exp %5 : f32\n"
         << "    %7 = const " << 0.125 * (k + 1) << " : f32\n"
         << "    %8 = add %6, %7 : f32\n"
         << "    %9 = erf %8 : f32\n"
         << "    store %out[i0], %9\n"
         << "  }\n}\n";
  }
  return text.str();
}

} // namespace

TEST(LLVMCodePlacement, ConstantsReachableInAFragmentedAddressSpace) {
  LoopModule module = parseLoopModule(constantHeavyModule(), "placement");
  std::vector<float> input(1000), expected(1000), actual(1000);
  for (int i = 0; i < 1000; ++i)
    input[i] = std::sin(i * 0.37f) * 2;
  std::unique_ptr<Backend> backend = createLLVMBackend();
  // Compile once first so that the JIT and LLVM's lazily built state exist
  // before the address space is fragmented.
  backend->compile(module, CompileOptions());

  Reservations reservations;
  std::vector<uintptr_t> holes = fragmentAddressSpace(reservations);
  ASSERT_FALSE(holes.empty()) << "cannot fragment the address space";
  std::vector<std::unique_ptr<KernelExecutable>> kernels =
      backend->compile(module, CompileOptions());
  ASSERT_EQ(kernels.size(), module.kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k) {
    SCOPED_TRACE(k);
    char *expectedBuffers[] = {reinterpret_cast<char *>(input.data()),
                               reinterpret_cast<char *>(expected.data())};
    char *actualBuffers[] = {reinterpret_cast<char *>(input.data()),
                             reinterpret_cast<char *>(actual.data())};
    interpretLoopKernel(module.kernels[k], expectedBuffers, nullptr);
    kernels[k]->run(actualBuffers, nullptr);
    for (int i = 0; i < 1000; ++i)
      ASSERT_NEAR(actual[i], expected[i],
                  1e-5f * std::fabs(expected[i]) + 1e-6f)
          << "element " << i;
  }
  // The code must be gone before the reservations around it.
  kernels.clear();
}
