//===- RunEntry.cpp - Guards of an entry, and running it ------------------===//
#include "RunEntry.h"

#include "Values/DictKeys.h"

#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <map>

namespace dynafuse {
namespace {

/// The tensor module output `index` of a run is: an input, a view of one
/// (made now, sharing its memory), or a buffer the run made.
PyRef graphOutput(const CacheEntry &entry, size_t index,
                  const std::vector<PyObject *> &inputs,
                  const TorchContext &context,
                  const std::map<std::string, int64_t> &symbols) {
  int input = entry.outputInput[index];
  if (input >= 0)
    return PyRef::borrow(inputs[size_t(input)]);
  const CacheEntry::InputView &view = entry.outputViews[index];
  if (view.input >= 0)
    return PyRef::steal(viewOfTensor(
        inputs[size_t(view.input)], evaluateAll(view.sizes, symbols),
        evaluateAll(view.strides, symbols), view.offset.evaluate(symbols)));
  const std::string &name = entry.module->module().outputs[index];
  return context.output(name);
}

int64_t integerOf(const std::map<std::string, Attribute> &attributes,
                  const std::string &name, int64_t fallback,
                  const std::map<std::string, int64_t> &symbols) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  std::optional<SymExpr> size = sizeOfAttribute(found->second);
  return size ? size->evaluate(symbols) : fallback;
}

PyObject *tupleOf(const std::vector<int64_t> &values) {
  PyObject *tuple = PyTuple_New(Py_ssize_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i)
    PyTuple_SET_ITEM(tuple, Py_ssize_t(i), PyLong_FromLongLong(values[i]));
  return tuple;
}

std::vector<int64_t> integersOf(const Attribute *attribute,
                                const std::map<std::string, int64_t> &symbols) {
  if (!attribute)
    return {};
  if (std::optional<std::vector<SymExpr>> sizes = sizesOfAttribute(*attribute))
    return evaluateAll(*sizes, symbols);
  if (const int64_t *value = std::get_if<int64_t>(attribute))
    return {*value};
  return {};
}

/// One view op of an output made from another output's tensor, as eager
/// makes it (a new reference, or null with a Python error set).
PyObject *applyViewStep(PyObject *tensor, const OutputViewStep &step,
                        const std::map<std::string, int64_t> &symbols) {
  const auto &attributes = step.attributes;
  auto attribute = [&](const char *name) -> const Attribute * {
    auto found = attributes.find(name);
    return found == attributes.end() ? nullptr : &found->second;
  };
  auto integer = [&](const char *name, int64_t fallback) {
    return integerOf(attributes, name, fallback, symbols);
  };
  PyRef sizes = PyRef::steal(tupleOf(evaluateAll(step.sizes, symbols)));
  Op op = step.op;
  if (op == Op::Slice) {
    int64_t dim = integer("dim", 0);
    PyRef index = PyRef::steal(PyTuple_New(Py_ssize_t(dim + 1)));
    for (int64_t k = 0; k < dim; ++k)
      PyTuple_SET_ITEM(index.get(), Py_ssize_t(k),
                       PySlice_New(nullptr, nullptr, nullptr));
    PyRef start = PyRef::steal(PyLong_FromLongLong(integer("start", 0)));
    PyRef end = PyRef::steal(PyLong_FromLongLong(
        integer("end", std::numeric_limits<int64_t>::max())));
    PyRef stride = PyRef::steal(PyLong_FromLongLong(integer("step", 1)));
    PyTuple_SET_ITEM(index.get(), Py_ssize_t(dim),
                     PySlice_New(start.get(), end.get(), stride.get()));
    return PyObject_GetItem(tensor, index.get());
  }
  if (op == Op::Narrow)
    return PyObject_CallMethod(tensor, "narrow", "LLL",
                               (long long)integer("dim", 0),
                               (long long)integer("start", 0),
                               (long long)integer("length", 0));
  if (op == Op::Select)
    return PyObject_CallMethod(tensor, "select", "LL",
                               (long long)integer("dim", 0),
                               (long long)integer("index", 0));
  if (op == Op::Transpose)
    return PyObject_CallMethod(tensor, "transpose", "LL",
                               (long long)integer("dim0", 0),
                               (long long)integer("dim1", 1));
  if (op == Op::Permute) {
    PyRef dims = PyRef::steal(tupleOf(integersOf(attribute("dims"), symbols)));
    return PyObject_CallMethod(tensor, "permute", "(O)", dims.get());
  }
  if (op == Op::Expand)
    return PyObject_CallMethod(tensor, "expand", "(O)", sizes.get());
  if (op == Op::Detach)
    return PyObject_CallMethod(tensor, "detach", nullptr);
  if (op == Op::Split || op == Op::Chunk || op == Op::Unbind) {
    PyRef pieces;
    if (op == Op::Unbind)
      pieces = PyRef::steal(PyObject_CallMethod(tensor, "unbind", "L",
                                                (long long)integer("dim", 0)));
    else if (op == Op::Chunk)
      pieces = PyRef::steal(PyObject_CallMethod(
          tensor, "chunk", "LL", (long long)integer("chunks", 1),
          (long long)integer("dim", 0)));
    else if (attribute("sizes"))
      pieces = PyRef::steal(PyObject_CallMethod(
          tensor, "split", "OL",
          PyRef::steal(tupleOf(integersOf(attribute("sizes"), symbols))).get(),
          (long long)integer("dim", 0)));
    else
      pieces = PyRef::steal(PyObject_CallMethod(
          tensor, "split", "LL", (long long)integer("size", 1),
          (long long)integer("dim", 0)));
    if (!pieces)
      return nullptr;
    PyObject *piece = PySequence_GetItem(pieces.get(), Py_ssize_t(step.piece));
    return piece;
  }
  // reshape, flatten, squeeze, unsqueeze: a view with the node's sizes; a
  // copy when the output's layout allows no view (the values still right).
  PyObject *view = PyObject_CallMethod(tensor, "view", "(O)", sizes.get());
  if (view)
    return view;
  PyErr_Clear();
  return PyObject_CallMethod(tensor, "reshape", "(O)", sizes.get());
}

/// Builds the Python values a run hands back (its return value, or the
/// state at a graph break) from their specs. Lists, dicts and objects made
/// during capture are built once per run: a second reference to one is a
/// SameObject spec.
class ResultBuilder {
public:
  ResultBuilder(const CacheEntry &entry, const std::vector<PyObject *> &inputs,
                const TorchContext &context, SourceResolver &resolver)
      : entry(entry), inputs(inputs), context(context), resolver(resolver) {}

  /// A new reference.
  PyObject *build(const OutputSpec &spec);

private:
  PyObject *remember(const OutputSpec &spec, PyObject *object) {
    if (spec.objectId >= 0)
      built[spec.objectId] = PyRef::borrow(object);
    return object;
  }
  PyObject *newObject(const OutputSpec &spec);
  /// Graph output `index` of this run: one object per output and run (a
  /// tensor returned twice is one object, as in eager), made as a view of
  /// another output where eager's is one.
  PyRef outputTensor(int index) {
    PyRef &made = graphOutputs[index];
    if (made)
      return made;
    auto link = entry.captured.outputsViewingOutputs.find(index);
    if (link == entry.captured.outputsViewingOutputs.end()) {
      made = graphOutput(entry, size_t(index), inputs, context,
                         resolver.symbols);
      return made;
    }
    PyRef view = outputTensor(link->second.base);
    for (const OutputViewStep &step : link->second.steps) {
      view = PyRef::steal(applyViewStep(view.get(), step, resolver.symbols));
      if (!view)
        break;
    }
    if (!view) {
      // The run's effects (write-backs) are done: never fail here. The
      // output the graph computed holds the same values, unaliased.
      PyErr_Clear();
      view = graphOutput(entry, size_t(index), inputs, context,
                         resolver.symbols);
    }
    graphOutputs[index] = view;
    return view;
  }

  const CacheEntry &entry;
  const std::vector<PyObject *> &inputs;
  const TorchContext &context;
  SourceResolver &resolver;
  std::map<int, PyRef> built;
  std::map<int, PyRef> graphOutputs;
};

PyObject *ResultBuilder::build(const OutputSpec &spec) {
  switch (spec.kind) {
  case OutputSpec::Kind::Null:
    fail("a NULL stack slot outside the stack");
  case OutputSpec::Kind::Source: {
    PyObject *object = resolver.get(spec.index);
    if (!object)
      fail("a value the frame held at a graph break cannot be fetched");
    return PyRef::borrow(object).release();
  }
  case OutputSpec::Kind::Attribute: {
    PyRef owner = PyRef::steal(build(spec.items.at(0)));
    PyObject *attribute =
        PyObject_GetAttrString(owner.get(), spec.keys.at(0).c_str());
    if (!attribute)
      fail("reading ." + spec.keys[0] + " at a graph break failed");
    return attribute;
  }
  case OutputSpec::Kind::Method: {
    PyRef function = PyRef::steal(build(spec.items.at(0)));
    PyRef self = PyRef::steal(build(spec.items.at(1)));
    return PyMethod_New(function.get(), self.get());
  }
  case OutputSpec::Kind::EnteredContext: {
    // A fresh instance of the grad-mode context, entered: the code after
    // the break runs inside it and leaves it through its __exit__.
    PyRef context = PyRef::steal(PyObject_CallNoArgs(spec.constant.get()));
    PyRef entered = PyRef::steal(
        context ? PyObject_CallMethod(context.get(), "__enter__", nullptr)
                : nullptr);
    PyObject *exit =
        entered ? PyObject_GetAttrString(context.get(), "__exit__") : nullptr;
    if (!exit)
      fail("re-entering a with block at a graph break failed");
    return exit;
  }
  case OutputSpec::Kind::Constant:
    return PyRef(spec.constant).release();
  case OutputSpec::Kind::Size:
    return PyLong_FromLongLong(spec.size.evaluate(resolver.symbols));
  case OutputSpec::Kind::Input:
    return PyRef::borrow(inputs[spec.index]).release();
  case OutputSpec::Kind::GraphOutput:
    return PyRef(outputTensor(spec.index)).release();
  case OutputSpec::Kind::Tuple: {
    PyObject *tuple = PyTuple_New(Py_ssize_t(spec.items.size()));
    for (size_t i = 0; i < spec.items.size(); ++i)
      PyTuple_SET_ITEM(tuple, i, build(spec.items[i]));
    if (!spec.constant)
      return tuple;
    // A named tuple or a struct sequence made from its items.
    PyObject *named = PyObject_CallOneArg(spec.constant.get(), tuple);
    Py_DECREF(tuple);
    return named;
  }
  case OutputSpec::Kind::Dict: {
    PyObject *dict = remember(spec, PyDict_New());
    for (size_t i = 0; i < spec.items.size(); ++i) {
      PyObject *value = build(spec.items[i]);
      PyRef key = capture::dictKeyObject(spec.keys[i]);
      if (!key || PyDict_SetItem(dict, key.get(), value) < 0)
        fail("rebuilding a dict's entry failed");
      Py_DECREF(value);
    }
    return dict;
  }
  case OutputSpec::Kind::List: {
    PyObject *list = remember(spec, PyList_New(0));
    for (const OutputSpec &item : spec.items) {
      PyRef value = PyRef::steal(build(item));
      PyList_Append(list, value.get());
    }
    return list;
  }
  case OutputSpec::Kind::NewObject:
    return newObject(spec);
  case OutputSpec::Kind::SameObject: {
    auto found = built.find(spec.index);
    if (found == built.end())
      fail("an object made during capture is referenced before it is built");
    return PyRef(found->second).release();
  }
  }
  return nullptr;
}

PyObject *ResultBuilder::newObject(const OutputSpec &spec) {
  // The instance as its builtin base makes it (object, dict, OrderedDict:
  // the class's own __new__ is theirs), then the instance dict and the dict
  // items capture tracked: the state __init__ and the code after it left.
  auto *cls = reinterpret_cast<PyTypeObject *>(spec.constant.get());
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef object = PyRef::steal(cls->tp_new(cls, empty.get(), nullptr));
  if (!object)
    fail(std::string("making an instance of ") + cls->tp_name + " failed");
  remember(spec, object.get());
  PyRef dict = PyRef::steal(PyObject_GenericGetDict(object.get(), nullptr));
  if (!dict)
    fail(std::string("an instance of ") + cls->tp_name + " has no __dict__");
  PyRef setItem;
  for (size_t i = 0; i < spec.items.size(); ++i) {
    PyRef value = PyRef::steal(build(spec.items[i]));
    PyRef key = i < spec.attributeCount
                    ? PyRef::steal(PyUnicode_FromString(spec.keys[i].c_str()))
                    : capture::dictKeyObject(spec.keys[i]);
    if (i < spec.attributeCount) {
      PyDict_SetItem(dict.get(), key.get(), value.get());
      continue;
    }
    // Dict items through the builtin base's own __setitem__ (an
    // OrderedDict keeps its order list).
    if (!setItem)
      for (PyTypeObject *base = cls; base; base = base->tp_base)
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
          setItem = PyRef::steal(PyObject_GetAttrString(
              reinterpret_cast<PyObject *>(base), "__setitem__"));
          break;
        }
    PyRef done = PyRef::steal(
        setItem ? PyObject_CallFunctionObjArgs(setItem.get(), object.get(),
                                               key.get(), value.get(), nullptr)
                : nullptr);
    if (!done)
      fail(std::string("filling an instance of ") + cls->tp_name + " failed");
  }
  return object.release();
}

} // namespace

bool guardsHold(const CacheEntry &entry, const GlobalState &now,
                SourceResolver &resolver, std::string *failed,
                const Guard **failedGuard) {
  if (!(entry.captured.state == now)) {
    if (failed)
      *failed = "the global state changed (grad mode, default dtype, "
                "autocast, torch function or dispatch modes)";
    return false;
  }
  for (const Guard &guard : entry.captured.guards) {
    if (!checkGuard(guard, resolver)) {
      if (failed)
        *failed = guard.describe(entry.captured.sources);
      if (failedGuard)
        *failedGuard = &guard;
      return false;
    }
  }
  return true;
}

PyObject *runEntry(const std::shared_ptr<const CacheEntry> &shared,
                   SourceResolver &resolver, DynafuseFrame *frame,
                   BreakState *pending) {
  const CacheEntry &entry = *shared;
  std::vector<PyObject *> inputs;
  std::vector<TensorArg> args;
  args.resize(entry.captured.inputSources.size());
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject *object = resolver.get(entry.captured.inputSources[i]);
    tensorView(object, &args[i].data, args[i].sizes, args[i].strides);
    inputs.push_back(object);
  }
  TorchContext context(entry.captured.torchCalls, entry.backend == "cuda"
                                                      ? currentTorchCudaStream()
                                                      : nullptr);
  context.weights = entry.prepackedWeights.get();
  if (entry.module) { // null: a break before any tensor operation
    context.inputs = ForwardInputs{&entry.module->module().inputs, &inputs};
    PooledTorchAllocations pooled(entry.allocationPlanner.get());
    context.run = pooled.run();
    // The graph casts as autocast would: its ATen calls must not cast again.
    AutocastSuspended noAutocast(entry.captured.state.autocast);
    // Symbols of Python ints (IntSymbol guards) come from the guards, the
    // rest from the inputs' sizes.
    static const std::map<std::string, int64_t> none;
    entry.module->run(args, context,
                      entry.captured.symbolicInts ? resolver.symbols : none);
  }
  for (const auto &[input, output] : entry.captured.writeBacks) {
    int source = entry.outputInput[size_t(output)];
    PyRef computed;
    if (source < 0)
      computed =
          context.output(entry.module->module().outputs[size_t(output)]);
    PyObject *value = source >= 0 ? inputs[size_t(source)] : computed.get();
    if (value != inputs[size_t(input)]) // else updated in place (in_place)
      copyIntoTensor(inputs[size_t(input)], value);
  }
  if (entry.backward) {
    const std::vector<std::string> &names = entry.module->module().outputs;
    std::vector<PyRef> objects;
    std::vector<PyObject *> outputs;
    std::vector<bool> made;
    for (size_t j = 0; j < names.size(); ++j) {
      objects.push_back(
          graphOutput(entry, j, inputs, context, resolver.symbols));
      outputs.push_back(objects.back().get());
      // Outputs returned as views of another output (made from it after
      // the node is attached, so autograd routes their gradients through
      // it) are not the node's: their tangents never arrive.
      made.push_back(entry.outputInput[j] < 0 &&
                     entry.outputViews[j].input < 0 &&
                     !entry.captured.outputsViewingOutputs.count(int(j)));
    }
    attachBackward(entry.backward, entry.backwardTorchCalls, inputs, outputs,
                   made, resolver.symbols);
  }
  for (int source : entry.captured.exitCalls) {
    PyObject *exit = resolver.get(source);
    PyRef done = PyRef::steal(
        exit ? PyObject_CallFunctionObjArgs(exit, Py_None, Py_None, Py_None,
                                            nullptr)
             : nullptr);
    if (!done)
      fail("leaving a with block failed");
  }
  const ResumePoint *point = entry.captured.resume.get();
  ResultBuilder builder(entry, inputs, context, resolver);
  auto repeatStores = [&] {
    for (const StoreEffect &store : entry.captured.stores) {
      PyObject *owner = resolver.get(store.owner);
      PyRef name = store.item
                       ? capture::dictKeyObject(store.name)
                       : PyRef::steal(PyUnicode_FromString(store.name.c_str()));
      if (store.value.kind == OutputSpec::Kind::Null) { // dict.pop
        if (!owner || PyDict_DelItem(owner, name.get()) < 0)
          fail("repeating the removal of ['" + store.name + "'] failed");
        continue;
      }
      PyRef value = PyRef::steal(builder.build(store.value));
      int failed = !owner ? -1
                   : store.item
                       ? PyDict_SetItem(owner, name.get(), value.get())
                       : PyObject_GenericSetAttr(owner, name.get(), value.get());
      if (failed < 0)
        fail("repeating the store of ." + store.name + " failed");
    }
  };
  if (!point) {
    PyRef returned = PyRef::steal(builder.build(entry.captured.result));
    repeatStores();
    return returned.release();
  }
  auto slotOf = [&](const OutputSpec &spec) {
    return spec.kind == OutputSpec::Kind::Null
               ? PyRef()
               : PyRef::steal(builder.build(spec));
  };
  BreakState state;
  state.entry = shared;
  state.point = point;
  for (const OutputSpec &spec : point->stack)
    state.stack.push_back(slotOf(spec));
  for (const OutputSpec &spec : point->inputs)
    state.inputs.push_back(slotOf(spec));
  state.locals.assign(size_t(point->localCount), PyRef::borrow(Py_None));
  for (const auto &[slot, spec] : point->locals)
    state.locals.at(size_t(slot)) = slotOf(spec);
  repeatStores();
  state.globals = PyRef::borrow(frame->globals);
  if (frame->function)
    state.closure = PyRef::borrow(PyFunction_GetClosure(frame->function));
  *pending = std::move(state);
  return PyRef::borrow(Py_None).release();
}

namespace {

/// The break's instruction raised: its with blocks' exits see the
/// exception, innermost first, as their handlers would have.
PyObject *leaveWithBlocks(const ResumePoint &point,
                          const std::vector<PyRef> &stack) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback && value)
    PyException_SetTraceback(value, traceback);
  for (int slot : point.withExits) {
    PyObject *exit = stack.at(size_t(slot)).get();
    if (!exit)
      continue;
    PyRef suppressed = PyRef::steal(PyObject_CallFunctionObjArgs(
        exit, type ? type : Py_None, value ? value : Py_None,
        traceback ? traceback : Py_None, nullptr));
    if (!suppressed || PyObject_IsTrue(suppressed.get()) != 0) {
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(traceback);
      if (suppressed)
        PyErr_SetString(PyExc_RuntimeError,
                        "a context manager suppressed an exception raised "
                        "at a graph break, which Dynafuse cannot continue "
                        "after");
      return nullptr;
    }
  }
  PyErr_Restore(type, value, traceback);
  return nullptr;
}

} // namespace

PyObject *continueAfterBreak(BreakState &state) {
  const ResumePoint &point = *state.point;
  std::vector<PyRef> stack = std::move(state.stack);
  PyObject *resumeCode = nullptr;
  if (point.instruction) {
    PyRef stub = PyRef::steal(
        PyFunction_New(point.stub.get(), state.globals.get()));
    std::vector<PyObject *> args;
    for (const PyRef &input : state.inputs)
      if (input)
        args.push_back(input.get());
    PyRef outputs = PyRef::steal(
        stub ? PyObject_Vectorcall(stub.get(), args.data(), args.size(),
                                   nullptr)
             : nullptr);
    if (!outputs)
      return leaveWithBlocks(point, stack);
    Py_ssize_t next = 0;
    for (bool null : point.instruction->outputs)
      stack.push_back(null ? PyRef()
                           : PyRef::borrow(PyTuple_GET_ITEM(outputs.get(),
                                                            next++)));
    resumeCode = point.resumeNext.get();
  } else {
    int truth = PyObject_IsTrue(state.inputs.at(0).get());
    if (truth < 0)
      return leaveWithBlocks(point, stack);
    bool jump = (truth != 0) == point.jumpWhenTrue;
    if (jump && point.keepOnJump)
      stack.push_back(state.inputs[0]);
    resumeCode = jump ? point.resumeJump.get() : point.resumeNext.get();
  }
  PyRef function =
      PyRef::steal(PyFunction_New(resumeCode, state.globals.get()));
  if (!function)
    return nullptr;
  if (state.closure && state.closure.get() != Py_None &&
      PyFunction_SetClosure(function.get(), state.closure.get()) < 0)
    return nullptr;
  std::vector<PyObject *> args;
  for (const PyRef &local : state.locals)
    args.push_back(local.get());
  for (const PyRef &slot : stack)
    if (slot)
      args.push_back(slot.get());
  return PyObject_Vectorcall(function.get(), args.data(), args.size(),
                             nullptr);
}

} // namespace dynafuse
