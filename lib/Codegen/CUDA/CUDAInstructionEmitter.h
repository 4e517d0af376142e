//===- CUDAInstructionEmitter.h - Instructions as CUDA C ------*- C++ -*-===//
//
// The text state of one CUDA kernel being written (output, indentation,
// fresh names, the names of values and symbols) and the statements of
// single instructions: loads and stores with their address arithmetic and
// bounds checks of indirect indices, and computed values. CUDAEmitter.cpp
// builds the kernel's structure (grid loops, vector lanes, reductions) on
// top of it.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_CUDA_CUDAINSTRUCTIONEMITTER_H
#define DYNAFUSE_CODEGEN_CUDA_CUDAINSTRUCTIONEMITTER_H

#include "CUDACodegen.h"

#include <map>
#include <set>
#include <sstream>
#include <string>

namespace dynafuse {

class CUDAInstructionEmitter {
public:
  explicit CUDAInstructionEmitter(const Kernel &kernel) : kernel(kernel) {
    for (const std::string &symbol : kernel.symbols)
      sizeSymbols.insert(symbol);
    for (size_t i = 0; i < kernel.instrs.size(); ++i)
      idByName[kernel.instrs[i].name] = int(i);
  }

protected:
  const Kernel &kernel;
  std::set<std::string> sizeSymbols;
  std::map<std::string, int> idByName;
  std::ostringstream out;
  int indent = 0;
  int uniqueCounter = 0;
  /// Whether the statements being emitted are shared by a whole block
  /// (stores only in thread 0).
  bool blockLevel = false;
  /// Vector path: the first lane's innermost index, and the vector
  /// component each widened load or store of the current lane uses.
  std::string laneBase;
  std::map<int, std::string> laneAccess;

  std::ostream &line() { return out << std::string(2 * indent, ' '); }
  std::string fresh(const char *stem) {
    return std::string("df_") + stem + std::to_string(uniqueCounter++);
  }

  /// The C name of a loop variable or size symbol ('%' names a value used
  /// as an indirect index).
  std::string symbolName(const std::string &name) const;
  int indirectId(const std::string &symbol) const;
  std::string value(int id) const;
  DType typeOf(int id) const { return kernel.instrs[id].type; }
  std::string expr(const SymExpr &e) const;

  /// Declares the flat element offset of a load or store in `offset` and,
  /// for indirect indices, a bool `ok` that is false (after reporting) when
  /// one is out of bounds. Emitted inside a block opened by the caller.
  void emitAddress(const Instr &instr, const std::string &offset,
                   const std::string &ok);
  void emitInstr(int id);
  void emitLoad(int id);
  void emitStore(const Instr &instr);
  std::string arg(const Instr &instr, int i) const;
  DType argType(const Instr &instr, int i) const;
  std::string compute(const Instr &instr) const;
};

} // namespace dynafuse

#endif
