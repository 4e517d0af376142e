//===- OpTable.cpp - Torch callables and their graph ops ------------------===//
#include "OpTable.h"

#include "dynafuse/Frontend/FrameCompiler.h"

#include "dynafuse/Support/Error.h"

namespace dynafuse {
namespace {

std::string stringOf(PyObject *object, const std::string &what) {
  if (!object || !PyUnicode_Check(object))
    fail("op table: " + what + " must be a string");
  return PyUnicode_AsUTF8(object);
}

ParamSpec::Kind parseKind(const std::string &kind) {
  static const std::map<std::string, ParamSpec::Kind> kinds = {
      {"operand", ParamSpec::Kind::Operand},
      {"operands", ParamSpec::Kind::Operands},
      {"tensor", ParamSpec::Kind::TensorOperand},
      {"optional_operand", ParamSpec::Kind::OptionalOperand},
      {"attr", ParamSpec::Kind::Attr},
      {"ints*", ParamSpec::Kind::IntsVararg},
      {"fixed", ParamSpec::Kind::Fixed},
      {"attr_ignored", ParamSpec::Kind::Ignored},
      {"inplace", ParamSpec::Kind::InPlaceFlag},
      {"shape_of", ParamSpec::Kind::ShapeOf},
      {"dtype_of", ParamSpec::Kind::DTypeOf}};
  auto found = kinds.find(kind);
  if (found == kinds.end())
    fail("op table: unknown parameter kind '" + kind + "'");
  return found->second;
}

/// spec = (graph_op, [(name, kind[, default]) | "*"], {attr: value})
OpBinding parseBinding(PyObject *spec) {
  if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3)
    fail("op table: an entry must be (graph_op, params, attributes)");
  OpBinding binding;
  std::string graphOp = stringOf(PyTuple_GET_ITEM(spec, 0), "graph op");
  PyObject *params = PyTuple_GET_ITEM(spec, 1);
  binding.overload = graphOp == "overload";
  binding.unflatten = graphOp == "unflatten";
  if (!binding.overload && !binding.unflatten) {
    std::optional<Op> op = findOp(graphOp);
    if (!op)
      fail("op table: unknown graph op '" + graphOp + "'");
    binding.graphOp = *op;
  }
  if (binding.overload) {
    if (!PyList_Check(params))
      fail("op table: an overload needs a list of alternatives");
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params); ++i)
      binding.alternatives.push_back(parseBinding(PyList_GET_ITEM(params, i)));
    return binding;
  }
  if (!PyList_Check(params))
    fail("op table: params of '" + graphOp + "' must be a list");
  bool keywordOnly = false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params); ++i) {
    PyObject *item = PyList_GET_ITEM(params, i);
    if (PyUnicode_Check(item) && stringOf(item, "marker") == "*") {
      keywordOnly = true;
      continue;
    }
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2)
      fail("op table: bad parameter of '" + graphOp + "'");
    ParamSpec param;
    param.name = stringOf(PyTuple_GET_ITEM(item, 0), "parameter name");
    param.kind = parseKind(stringOf(PyTuple_GET_ITEM(item, 1), "kind"));
    param.keywordOnly = keywordOnly;
    param.attribute = param.name;
    if (PyTuple_GET_SIZE(item) > 2) {
      param.hasDefault = true;
      param.defaultValue = PyRef::borrow(PyTuple_GET_ITEM(item, 2));
    }
    if (PyTuple_GET_SIZE(item) > 3)
      param.attribute = stringOf(PyTuple_GET_ITEM(item, 3), "attribute name");
    binding.params.push_back(param);
  }
  PyObject *attributes = PyTuple_GET_ITEM(spec, 2);
  if (!PyDict_Check(attributes))
    fail("op table: attributes of '" + graphOp + "' must be a dict");
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(attributes, &pos, &key, &value))
    binding.extraAttributes.push_back(
        {stringOf(key, "attribute name"), PyRef::borrow(value)});
  return binding;
}

} // namespace

void OpTable::setFunctions(PyObject *dict) {
  if (!PyDict_Check(dict))
    fail("op table: functions must be a dict");
  functions.clear();
  functionKeys.clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    functions[key] = parseBinding(value);
    functionKeys.push_back(PyRef::borrow(key));
  }
}

void OpTable::setMethods(PyObject *dict) {
  if (!PyDict_Check(dict))
    fail("op table: methods must be a dict");
  methods.clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value))
    methods[stringOf(key, "method name")] = parseBinding(value);
}

void OpTable::setStateQueries(PyObject *dict) {
  if (!PyDict_Check(dict))
    fail("op table: state queries must be a dict");
  stateQueries.clear();
  stateKeys.clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    stateQueries[key] = stringOf(value, "state query answer");
    stateKeys.push_back(PyRef::borrow(key));
  }
}

void OpTable::setPolyfills(PyObject *dict) {
  polyfills.clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!PyFunction_Check(value))
      fail("op table: a polyfill must be a Python function");
    polyfills[key] = {PyRef::borrow(key), PyRef::borrow(value)};
  }
}

namespace {
AutocastPolicy autocastPolicyNamed(PyObject *name) {
  std::string text = stringOf(name, "autocast policy");
  if (text == "lower_precision_fp")
    return AutocastPolicy::LowerPrecision;
  if (text == "fp32")
    return AutocastPolicy::Float32;
  if (text == "promote")
    return AutocastPolicy::Promote;
  fail("op table: unknown autocast policy '" + text + "'");
}
} // namespace

void OpTable::setAutocastPolicy(PyObject *dict) {
  PyObject *functionsDict =
      PyDict_Check(dict) ? PyDict_GetItemString(dict, "functions") : nullptr;
  PyObject *methodsDict =
      functionsDict ? PyDict_GetItemString(dict, "methods") : nullptr;
  PyObject *pad = methodsDict ? PyDict_GetItemString(dict, "pad") : nullptr;
  PyObject *modes =
      pad ? PyDict_GetItemString(dict, "pad_modes_fp32") : nullptr;
  if (!modes || !PyDict_Check(functionsDict) || !PyDict_Check(methodsDict) ||
      !PyTuple_Check(modes))
    fail("op table: the autocast policy needs functions, methods, pad and "
         "pad_modes_fp32");
  autocastFunctions.clear();
  autocastKeys.clear();
  autocastMethods.clear();
  padModesFloat32.clear();
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(functionsDict, &pos, &key, &value)) {
    autocastFunctions[key] = autocastPolicyNamed(value);
    autocastKeys.push_back(PyRef::borrow(key));
  }
  pos = 0;
  while (PyDict_Next(methodsDict, &pos, &key, &value))
    autocastMethods[stringOf(key, "method name")] = autocastPolicyNamed(value);
  autocastPadCallable = PyRef::borrow(pad);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(modes); ++i)
    padModesFloat32.push_back(stringOf(PyTuple_GET_ITEM(modes, i), "mode"));
}

AutocastPolicy OpTable::autocastPolicy(PyObject *callable) const {
  auto found = autocastFunctions.find(callable);
  return found == autocastFunctions.end() ? AutocastPolicy::None
                                          : found->second;
}

AutocastPolicy OpTable::autocastMethodPolicy(const std::string &name) const {
  auto found = autocastMethods.find(name);
  return found == autocastMethods.end() ? AutocastPolicy::None : found->second;
}

PyObject *OpTable::polyfill(PyObject *callable) const {
  auto found = polyfills.find(callable);
  return found == polyfills.end() ? nullptr : found->second.second.get();
}

std::string OpTable::stateQuery(PyObject *callable) const {
  auto found = stateQueries.find(callable);
  return found == stateQueries.end() ? "" : found->second;
}

const OpBinding *OpTable::function(PyObject *callable) const {
  auto found = functions.find(callable);
  return found == functions.end() ? nullptr : &found->second;
}

const OpBinding *OpTable::method(const std::string &name) const {
  auto found = methods.find(name);
  return found == methods.end() ? nullptr : &found->second;
}

OpTable &opTable() {
  static OpTable *table = new OpTable(); // Leaked: lives until exit.
  return *table;
}

} // namespace dynafuse

namespace dynafuse {

void setOpTables(PyObject *functions, PyObject *methods, PyObject *stateQueries,
                 PyObject *polyfills, PyObject *autocast) {
  opTable().setFunctions(functions);
  opTable().setMethods(methods);
  if (stateQueries)
    opTable().setStateQueries(stateQueries);
  if (polyfills)
    opTable().setPolyfills(polyfills);
  if (autocast)
    opTable().setAutocastPolicy(autocast);
}

} // namespace dynafuse
