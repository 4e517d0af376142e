//===- LocalLiveness.cpp - Backward liveness of local slots ---------------===//
#include "LocalLiveness.h"

#include <opcode.h>

namespace dynafuse {
namespace {

/// Instructions after which control never reaches the next one.
bool endsFlow(int opcode) {
  switch (opcode) {
  case JUMP_FORWARD:
  case JUMP_BACKWARD:
  case JUMP_BACKWARD_NO_INTERRUPT:
  case RETURN_VALUE:
#ifdef RETURN_CONST // 3.12
  case RETURN_CONST:
#endif
  case RAISE_VARARGS:
  case RERAISE:
    return true;
  default:
    return false;
  }
}

} // namespace

std::vector<std::vector<bool>>
liveLocals(const std::vector<Instruction> &instructions,
           const std::map<int, int> &indexOfOffset,
           const std::vector<ExceptionTableEntry> &handlers, int locals) {
  size_t count = instructions.size();
  std::vector<std::vector<size_t>> successors(count);
  int lastStart = 0;
  for (size_t i = 0; i < count; ++i) {
    const Instruction &in = instructions[i];
    if (in.start >= 0)
      lastStart = in.start;
    if (!endsFlow(in.opcode) && i + 1 < count)
      successors[i].push_back(i + 1);
    if (in.target >= 0) {
      auto found = indexOfOffset.find(in.target);
      if (found != indexOfOffset.end())
        successors[i].push_back(size_t(found->second));
    }
    // An instruction inside a protected range may continue in its handler.
    for (const ExceptionTableEntry &entry : handlers) {
      if (lastStart < entry.start || lastStart >= entry.end)
        continue;
      auto found = indexOfOffset.find(entry.target);
      if (found != indexOfOffset.end())
        successors[i].push_back(size_t(found->second));
    }
  }
  std::vector<std::vector<bool>> live(count, std::vector<bool>(size_t(locals)));
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = count; i-- > 0;) {
      std::vector<bool> in(size_t(locals), false);
      for (size_t next : successors[i])
        for (int slot = 0; slot < locals; ++slot)
          if (live[next][size_t(slot)])
            in[size_t(slot)] = true;
      const Instruction &instruction = instructions[i];
      bool inRange = instruction.arg >= 0 && instruction.arg < locals;
      switch (instruction.opcode) {
      case STORE_FAST:
      case DELETE_FAST:
        if (inRange)
          in[size_t(instruction.arg)] = false;
        break;
      case LOAD_FAST:
#ifdef LOAD_FAST_CHECK // 3.12
      case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR // 3.12: saved, then restored by a store
      case LOAD_FAST_AND_CLEAR:
#endif
        if (inRange)
          in[size_t(instruction.arg)] = true;
        break;
      default:
        break;
      }
      if (in != live[i]) {
        live[i] = std::move(in);
        changed = true;
      }
    }
  }
  return live;
}

} // namespace dynafuse
