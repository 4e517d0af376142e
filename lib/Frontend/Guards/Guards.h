//===- Guards.h - Where captured values come from and what was assumed ---===//
//
// A Source says how to fetch a value from a frame (an argument, a global, an
// attribute of another source, a closure cell, a tuple item). A Guard is a
// fact the capture relied on about one source (tensor metadata, a constant's
// value, an object's identity). A compiled entry is valid for a frame when
// all its guards hold; sources are then also how graph inputs are fetched.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_GUARDS_H
#define DYNAFUSE_CAPTURE_GUARDS_H

#include "Entry/EvalFrameHook.h"
#include "dynafuse/Support/PyRef.h"
#include "ShapeEnv.h"
#include "dynafuse/Torch/TorchBridge.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {

struct Source {
  /// Local, Global, Closure: of the frame being compiled. FunctionGlobal,
  /// FunctionClosure: of the function object at parent (an inlined call).
  /// TypeAttr: an attribute of the parent's type (a method's function).
  /// SuperAttr: what super(fixed, parent).name finds in a class dict.
  /// Fixed: an object held by the entry itself (torch's global hook dicts).
  enum class Kind {
    Local,
    Global,
    Attr,
    Closure,
    Item,
    FunctionGlobal,
    FunctionClosure,
    TypeAttr,
    SuperAttr,
    Fixed,
    DictItem,
    ClassEntry,
    Environ,
    /// A 0-dim i64 tensor on the device `name` names, drawn from torch's
    /// generator afresh for every run (the seed of a graph's `uniform`
    /// ops: dropout in training mode).
    RandomSeed
  };
  Kind kind = Kind::Local;
  int parent = -1;
  /// Local: localsplus index; closures: closure tuple index; Item: index.
  int index = 0;
  /// Global, Attr, FunctionGlobal, TypeAttr: the name (interned); Environ:
  /// the environment variable (os.environ.get(name), None when unset).
  PyRef name;
  /// Fixed: the object; SuperAttr, ClassEntry: the class the lookup starts
  /// after (ClassEntry: null for the whole MRO). ClassEntry: the raw entry
  /// for `name` in the MRO of the class `parent` (no descriptor runs).
  PyRef fixed;
  std::string describe(const std::vector<Source> &all) const;
};

/// A source's name or dict key as text: a string as it is (quoted when
/// `quoted`), another constant key (an int, a bool) as its type and repr.
std::string keyText(PyObject *key, bool quoted);

/// Whether two constants are the same value for a guard: floats by bit
/// pattern (so -0.0 and 0.0 differ and a NaN matches itself), tuples item
/// by item, a set against a list (its members as capture saw them) in
/// iteration order, the rest by ==.
bool sameConstant(PyObject *value, PyObject *expected);

/// What super(cls, object).name finds: the entry of the first class after
/// cls in type(object)'s MRO whose dict has name (borrowed; no descriptor
/// runs), or null.
PyObject *lookupPastClass(PyObject *object, PyObject *cls, PyObject *name);
/// The entry for name in the MRO of the class `type`, starting after the
/// class `after` (null: from the start), borrowed; no descriptor runs.
PyObject *lookupInClass(PyObject *type, PyObject *after, PyObject *name);

struct Guard {
  enum class Kind {
    Tensor,
    Equals,
    Identity,
    TypeIs,
    TupleLength,
    EmptyDict,
    DictLength,
    SameObject,
    OtherObject,
    OtherStorage,
    NoAttribute,
    NoInstanceAttribute,
    NoKey,
    HasKey,
    Distinct,
    Shape,
    /// A Python int made a size symbol (symbolicSizes[0]): exactly an int,
    /// at least 2; the first guard to meet the symbol binds it.
    IntSymbol
  };
  Kind kind = Kind::Tensor;
  int source = -1;
  /// SameObject / OtherObject: the source compared with (`is`).
  int other = -1;
  /// Distinct: the sources that (with `source`) hold pairwise different
  /// objects; OtherStorage: the tensors whose memory `source` must not
  /// share.
  std::vector<int> group;
  TensorMeta tensor;
  /// Tensor with symbolic dims: its sizes and strides as size symbols and
  /// expressions of them (empty: tensor.sizes and strides exactly). The
  /// first guard to meet a symbol binds it; later ones compare.
  std::vector<SymExpr> symbolicSizes, symbolicStrides;
  /// Shape (source -1): a decision on sizes, over symbols bound before.
  ShapeGuard shape;
  /// Equals: the value (compared with exact type); Identity: the object;
  /// NoAttribute: the attribute name the object must lack;
  /// NoInstanceAttribute: the name its instance __dict__ must lack (a
  /// per-instance override of a method); NoKey, HasKey: the key the dict
  /// or set must lack, or hold;
  /// TypeIs: the exact type; TupleLength: the exact type (tuple or list).
  PyRef expected;
  /// Identity of an object that takes weak references: `expected` is a
  /// weak reference to it, so the entry does not keep alive what the
  /// caller made for one call, and a guard whose object is gone is known
  /// to fail for good (Frontend/Entry/Settling.h).
  bool weak = false;
  size_t length = 0;
  /// Identity: the object compared with (borrowed), null once a weakly
  /// held one is gone.
  PyObject *identity() const;
  std::string describe(const std::vector<Source> &sources) const;
};

/// Fetches source values for one frame, each at most once, and holds the
/// size symbols the tensor guards bound from them.
class SourceResolver {
public:
  SourceResolver(const std::vector<Source> &sources, DynafuseFrame *frame)
      : sources(sources), frame(frame), values(sources.size()),
        resolved(sources.size(), false) {}
  /// Borrowed; null (with no Python error set) when unavailable.
  PyObject *get(int source);
  /// Size symbols bound so far by symbolic tensor guards.
  std::map<std::string, int64_t> symbols;

private:
  PyRef fetch(const Source &source);
  const std::vector<Source> &sources;
  DynafuseFrame *frame;
  std::vector<PyRef> values;
  std::vector<bool> resolved;
};

/// True when the guard holds for the frame.
bool checkGuard(const Guard &guard, SourceResolver &resolver);

} // namespace dynafuse

#endif
