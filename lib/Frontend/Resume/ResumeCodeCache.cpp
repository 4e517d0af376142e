//===- ResumeCodeCache.cpp - Which generated code a graph break uses ------===//
//
// Stubs and resume functions are made once per (original code, offset,
// stack layout) and kept on the original code object. A break inside a
// resume function is translated back to its original's offsets, so the
// resume function after a second break is the same object whichever path
// led there.
//
//===----------------------------------------------------------------------===//
#include "Entry/CodeObjectCache.h"

#include "dynafuse/Support/Error.h"

namespace dynafuse {
namespace {

std::string layoutKey(const StackLayout &layout) {
  std::string key;
  for (bool null : layout)
    key += null ? 'N' : 'v';
  return key;
}

/// The object a weak reference points to (new reference), or null.
PyRef referent(PyObject *weak) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *object = nullptr;
  if (PyWeakref_GetRef(weak, &object) < 0)
    PyErr_Clear();
  return PyRef::steal(object);
#else
  PyObject *object = PyWeakref_GetObject(weak);
  return object && object != Py_None ? PyRef::borrow(object) : PyRef();
#endif
}

} // namespace

void prepareResumeCode(ResumePoint &point, PyCodeObject *code,
                       const CompilerConfig &config) {
  CodeCache *cache = cacheOf(code, config);
  if (!cache)
    fail("a code object without a cache");
  PyRef original = PyRef::borrow(reinterpret_cast<PyObject *>(code));
  int shift = 0;
  if (cache->origin) {
    original = referent(cache->origin.get());
    if (!original)
      fail("the original code of a resume function is gone");
    shift = cache->originShift;
  }
  auto *originalCode = reinterpret_cast<PyCodeObject *>(original.get());
  CodeCache *originalCache = cacheOf(originalCode, config);
  if (!originalCache)
    fail("a code object without a cache");
  if (point.offset < shift)
    fail("a graph break inside a resume function's prologue");
  int line = point.line;

  auto resumeAt = [&](int target, const StackLayout &layout) {
    std::string key =
        "resume:" + std::to_string(target - shift) + ":" + layoutKey(layout);
    for (int unbound : point.unboundLocals)
      key += ":u" + std::to_string(unbound);
    PyRef &slot = originalCache->generated[key];
    if (!slot) {
      ResumeCode made = makeResumeCode(originalCode, target - shift, layout,
                                       point.unboundLocals, line);
      CodeCache *madeCache =
          cacheOf(reinterpret_cast<PyCodeObject *>(made.code.get()), config);
      if (!madeCache)
        fail("a resume function without a cache");
      madeCache->origin =
          PyRef::steal(PyWeakref_NewRef(original.get(), nullptr));
      if (!madeCache->origin) {
        PyErr_Clear();
        fail("cannot refer to a resume function's original code");
      }
      madeCache->originShift = made.shift;
      slot = made.code;
    }
    return slot;
  };

  StackLayout stack;
  for (const OutputSpec &spec : point.stack)
    stack.push_back(spec.kind == OutputSpec::Kind::Null);
  if (point.instruction) {
    StackLayout inputs;
    for (const OutputSpec &spec : point.inputs)
      inputs.push_back(spec.kind == OutputSpec::Kind::Null);
    std::string key = "stub:" + std::to_string(point.offset - shift) + ":" +
                      layoutKey(inputs);
    PyRef &stub = originalCache->generated[key];
    if (!stub) {
      PyRef made = makeBreakStub(originalCode, *point.instruction, inputs, line);
      // A stub runs what capture could not: never captured itself.
      CodeCache *stubCache =
          cacheOf(reinterpret_cast<PyCodeObject *>(made.get()), config);
      if (!stubCache)
        fail("a break stub without a cache");
      stubCache->skip = stubCache->skippedFile = true;
      stub = made;
    }
    point.stub = stub;
    StackLayout after = stack;
    after.insert(after.end(), point.instruction->outputs.begin(),
                 point.instruction->outputs.end());
    point.resumeNext = resumeAt(point.next, after);
  } else {
    point.resumeNext = resumeAt(point.next, stack);
    StackLayout jumped = stack;
    if (point.keepOnJump)
      jumped.push_back(false);
    point.resumeJump = resumeAt(point.jumpTarget, jumped);
  }
  // A resume function's own stack arguments are dead past its prologue.
  point.localCount = originalCode->co_nlocals;
  std::vector<std::pair<int, OutputSpec>> kept;
  for (auto &local : point.locals)
    if (local.first < point.localCount)
      kept.push_back(std::move(local));
  point.locals = std::move(kept);
}

} // namespace dynafuse
