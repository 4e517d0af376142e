//===- ObjectKinds.h - What capture tells of an object ---------*- C++ -*-===//
//
// Questions the tracer asks of a Python object or a Var that need none of
// its state: which torch classes and functions an object is, and which
// kinds of Var compare, count as sizes or were made during capture.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_OBJECTKINDS_H
#define DYNAFUSE_FRONTEND_OBJECTKINDS_H

#include "Var.h"
#include "dynafuse/Graph/DType.h"

#include <Python.h>

#include <string>

namespace dynafuse {
namespace capture {

/// torch.nn.Module (borrowed).
PyObject *moduleClass();
/// collections.OrderedDict (borrowed).
PyObject *orderedDictType();
/// torch.nn.Module.__init__ as the class holds it now (TorchDynamo, once
/// imported, wraps it to tag each new module).
bool isModuleInit(PyObject *callable);
/// Whether callable is nn.Module.__call__ (`module.__call__` bound: what
/// diffusers hands torch.utils.checkpoint), which calls the module.
bool isModuleCall(PyObject *callable);
/// An instance (not a class) of torch.nn.Module.
bool isModule(PyObject *object);
/// isinstance(object, torch.nn.<name>).
bool isInstanceOf(PyObject *object, const char *name);
/// An instance of a class the torch family of packages defines (its
/// module's name starts with "torch": operator overloads, torch's own
/// callable objects).
bool isTorchClassInstance(PyObject *object);
/// torch._assert.
bool isTorchAssert(PyObject *object);
/// torchvision's and torch's _log_api_usage_once: calls skipped.
bool onlyLogsUsage(PyObject *callable);
/// math.sqrt, math.log, ...: pure functions of numbers.
bool isMathFunction(PyObject *callable);
/// os.environ (borrowed; looked up once: the mapping lives as long as os),
/// and whether object is it.
PyObject *osEnviron();
bool isEnvironment(PyObject *object);
/// torch.Tensor.<name>, or torch._C.TensorBase.<name> for base (new
/// reference), or null.
PyObject *tensorMethodObject(const std::string &name, bool base = false);
/// size, dim, numel, ndimension, nelement, is_floating_point, is_complex,
/// is_signed: static under the tensor guards.
bool isMetadataMethod(const std::string &name);
/// torch.<dtype> and torch.device(device) as Python objects.
PyRef dtypeObject(DType dtype);
PyRef deviceObject(const std::string &device);

/// A SymInt var.
inline bool isSymInt(const VarPtr &var) {
  return var->kind == Var::Kind::SymInt;
}
/// A Constant int or a SymInt.
bool isSizeLike(const VarPtr &var);
/// Constants, dtypes and devices compare without running user code.
bool comparableAtCapture(const VarPtr &var);
/// A constant, or a list, tuple or set of them (nested), as the Python
/// object it stands for; null for anything else.
PyRef constantValueOf(const VarPtr &var);
/// A call's arguments as a tuple and a dict of constantValueOf each;
/// false when one is not a constant.
bool constantCallArguments(const std::vector<VarPtr> &args,
                           const Keywords &keywords, PyRef &positional,
                           PyRef &named);
/// A mutable value the trace made (object, list, dict, set): `is`
/// compares it by var.
bool madeDuringCapture(const VarPtr &var);

} // namespace capture
} // namespace dynafuse

#endif
