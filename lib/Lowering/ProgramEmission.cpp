//===- ProgramEmission.cpp - The loop module from the schedule ------------===//
//
// The emit pass: names a buffer for every input and realized value, then
// emits each scheduled step: a kernel (loops in the members' memory order,
// each member's element computed by the ElementEmitter and stored) with its
// allocations and call, or an extern op reading its operands through view
// steps. A value that cannot be placed stops emission and is reported back
// to lowerGraph, which realizes it and runs layout, schedule and emit again.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LoweringPasses.h"

#include "dynafuse/Lowering/ElementEmitter.h"
#include "dynafuse/Lowering/PieceLoops.h"
#include "dynafuse/Lowering/StridedView.h"

#include <algorithm>
#include <functional>

namespace dynafuse {
namespace {

class ProgramEmitter {
public:
  explicit ProgramEmitter(LoweringState &state)
      : state(state), graph(state.graph), module(state.module) {}

  const Value *run() {
    module.name = graph.name;
    module.hasProgram = true;
    declareInputs();
    nameBuffers();
    for (const LoweringStep &step : state.steps)
      if (const Value *unplaced = emitStep(step))
        return unplaced;
    for (const Value *output : graph.outputs) {
      auto buffer = state.bufferOf.find(output);
      if (buffer != state.bufferOf.end()) {
        module.outputs.push_back(buffer->second);
        continue;
      }
      std::string view;
      if (const Value *unplaced = viewOf(output, view))
        return unplaced;
      module.outputs.push_back(view);
    }
    return nullptr;
  }

private:
  LoweringState &state;
  const Graph &graph;
  LoopModule &module;

  std::string uniqueName(const std::string &base) {
    std::string name = base;
    for (int suffix = 0; state.usedNames.count(name); ++suffix)
      name = base + "_" + std::to_string(suffix);
    state.usedNames.insert(name);
    return name;
  }

  void declareInputs() {
    std::set<std::string> symbols;
    for (const Value *input : graph.inputs) {
      state.bufferOf[input] = uniqueName(input->name);
      module.inputs.push_back(LoopBuffer{state.bufferOf[input], input->type});
      for (const SymExpr &size : input->type.sizes)
        size.collectSymbols(symbols);
      for (const SymExpr &stride : input->type.strides)
        stride.collectSymbols(symbols);
    }
    // Symbols no input's sizes give (Python ints made symbols: a cache
    // allocated in the graph at a length an argument holds), which the
    // caller binds.
    for (const auto &node : graph.nodes) {
      for (const Value *result : node->results)
        for (const SymExpr &size : result->type.sizes)
          size.collectSymbols(symbols);
      for (const auto &[name, attribute] : node->attributes)
        collectSymbols(attribute, symbols);
    }
    module.symbols.assign(symbols.begin(), symbols.end());
  }

  void nameBuffers() {
    int counter = 0;
    for (const auto &node : graph.nodes)
      for (const Value *result : node->results)
        if (state.realized.count(result))
          state.bufferOf[result] =
              uniqueName("buf" + std::to_string(counter++));
  }

  /// Null when step was emitted, else the value it could not place.
  const Value *emitStep(const LoweringStep &step) {
    if (step.externNode)
      return emitExtern(*step.externNode);
    Kernel kernel;
    kernel.name = graph.name + "_k" + std::to_string(module.kernels.size());
    KernelBuilder builder(kernel);
    std::set<const Value *> members(step.members.begin(), step.members.end());
    ElementEmitter emitter(kernel, builder, state.bufferOf, state.bufferTypes,
                           members);
    const Value *first = step.members[0];
    // One loop nest; or, for a concatenation the members read (PieceLoops.h),
    // the loops outside its dim once and, inside them, one nest per piece
    // whose loop over that dim runs over the piece only.
    const std::vector<size_t> &order = state.orderOf.at(first);
    std::optional<PieceSplit> split = pieceSplitOf(state, step);
    size_t outer = order.size();
    if (split)
      outer = size_t(std::find(order.begin(), order.end(), split->dim) -
                     order.begin());
    std::vector<SymExpr> index(first->type.rank());
    for (size_t k = 0; k < outer; ++k)
      index[order[k]] = builder.openLoop(first->type.sizes[order[k]]);
    int64_t offset = 0;
    size_t nests = split ? split->lengths.size() : 1;
    for (size_t nest = 0; nest < nests; ++nest) {
      if (split && split->lengths[nest] == 0)
        continue;
      for (size_t k = outer; k < order.size(); ++k)
        index[order[k]] =
            k == outer ? SymExpr(offset) +
                             builder.openLoop(SymExpr(split->lengths[nest]))
                       : builder.openLoop(first->type.sizes[order[k]]);
      for (const Value *member : step.members) {
        int element = emitter.emit(member, index);
        if (const Value *unplaced = emitter.needsRealization())
          return unplaced;
        emitter.store(member, index, element);
      }
      for (size_t k = outer; k < order.size(); ++k)
        builder.closeLoop();
      if (split)
        offset += split->lengths[nest];
    }
    for (size_t k = 0; k < outer; ++k)
      builder.closeLoop();
    builder.finish();
    kernel.symbols = symbolsOf(kernel);
    for (const Value *member : step.members) {
      ProgramStep alloc;
      alloc.kind = ProgramStep::Kind::Alloc;
      alloc.result = state.bufferOf.at(member);
      alloc.type = state.bufferTypes.at(member);
      module.steps.push_back(alloc);
    }
    ProgramStep call;
    call.kind = ProgramStep::Kind::Call;
    call.kernel = kernel.name;
    for (const LoopBuffer &param : kernel.params)
      call.args.push_back(param.name);
    module.steps.push_back(call);
    module.kernels.push_back(std::move(kernel));
    return nullptr;
  }

  const Value *emitExtern(const Node &node) {
    ProgramStep step;
    step.kind = ProgramStep::Kind::Extern;
    step.op = node.op;
    step.attributes = node.attributes;
    for (const Value *result : node.results) {
      step.results.push_back(state.bufferOf.at(result));
      step.types.push_back(state.bufferType(result));
    }
    for (const Operand &operand : node.operands) {
      std::string view;
      if (const Value *unplaced = viewOf(operand.value, view))
        return unplaced;
      step.args.push_back(view);
    }
    module.steps.push_back(step);
    return nullptr;
  }

  /// Sets name to the buffer an extern reads operand through, adding a
  /// view step when it is not a buffer itself. With the layouts buffers
  /// were given (channels-last), a reshape that looked like a view may not
  /// be one: then operand is returned, to be computed into a buffer of its
  /// own.
  const Value *viewOf(const Value *operand, std::string &name) {
    BufferView viewed;
    if (!describeView(operand, state.realized, viewed, &state.bufferTypes))
      return operand;
    const std::string &base = state.bufferOf.at(viewed.base);
    if (viewed.base == operand) {
      name = base;
      return nullptr;
    }
    ProgramStep step;
    step.kind = ProgramStep::Kind::View;
    step.result = uniqueName("view" + std::to_string(state.viewCounter++));
    step.source = base;
    step.offset = viewed.view.offset;
    step.type.dtype = operand->type.dtype;
    step.type.device = operand->type.device;
    step.type.sizes = viewed.view.sizes;
    step.type.strides = viewed.view.strides;
    module.steps.push_back(step);
    name = step.result;
    return nullptr;
  }

  std::vector<std::string> symbolsOf(const Kernel &kernel) const {
    std::set<std::string> used;
    for (const LoopBuffer &param : kernel.params) {
      for (const SymExpr &size : param.type.sizes)
        size.collectSymbols(used);
      for (const SymExpr &stride : param.type.strides)
        stride.collectSymbols(used);
    }
    // Sizes used as values (a `full` of a symbolic size: x.new_tensor of
    // shapes), in the kernel's index instructions.
    for (const Instr &instr : kernel.instrs)
      for (const SymExpr &index : instr.index)
        index.collectSymbols(used);
    // Extents no buffer's sizes give (a sum over x.repeat(n, 1) with n an
    // int symbol, into a scalar).
    std::function<void(const std::vector<Stmt> &)> extents =
        [&](const std::vector<Stmt> &block) {
          for (const Stmt &stmt : block) {
            stmt.extent.collectSymbols(used);
            for (const SymExpr &extent : stmt.extents)
              extent.collectSymbols(used);
            extents(stmt.body);
          }
        };
    extents(kernel.body);
    std::vector<std::string> symbols;
    for (const std::string &symbol : module.symbols)
      if (used.count(symbol))
        symbols.push_back(symbol);
    return symbols;
  }
};

} // namespace

const Value *emitProgram(LoweringState &state) {
  return ProgramEmitter(state).run();
}

} // namespace dynafuse
