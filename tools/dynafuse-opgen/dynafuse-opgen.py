#!/usr/bin/env python3
"""dynafuse-opgen: writes each layer's op tables from the op definitions.

    dynafuse-opgen.py --definitions include/dynafuse/Ops --out build/include

The definitions (include/dynafuse/Ops/*Ops.py, one file per op family) are
Python calls op(name, facet=...), read here with nothing but the standard
library (the build needs no torch and no LLVM for them). From them come
  dynafuse/Graph/Ops.def          every op's typed key and name (OpId.h);
  dynafuse/Ops/<Family>Ops.inc          the registry entries (OpRegistry.h);
  dynafuse/Ops/PointwiseRules.inc       the pointwise lowering rules;
  dynafuse/Ops/ReductionKinds.inc       the reductions' ReduceKinds;
  dynafuse/Ops/<Family>Derivatives.inc  the derivative table entries;
  dynafuse/Ops/<Family>Replays.inc      graph replay's ATen rules;
  dynafuse/Ops/ExternAten.inc           how extern ops run through ATen.
Each .inc is a list of statements that its family file includes inside the
function that fills the table. A malformed definition is an error naming
the op and the facet, and the build stops.
"""
import argparse
import ast
import pathlib
import sys

# The definition files in registry order, and the family of their ops.
FAMILIES = [("PointwiseOps", "Pointwise"), ("ReductionOps", "Reduction"),
            ("ViewOps", "View"), ("CopyingRemapOps", "View"),
            ("DataMovementOps", "DataMovement"), ("ExternOps", "Extern"),
            ("CompositeOps", "Composite")]

TYPE_RULES = {"Promote", "PromoteToFloat", "FloatOnly", "NumericOnly",
              "IntegralOnly", "BoolToI64", "FirstOperand", "Compare", "Cast"}

# The facets an op of each family may have, and those it must have.
FACETS = {
    "Pointwise": ({"arity", "rule", "attributes", "optional_operands",
                   "condition_first", "scalar_last", "costly", "verify",
                   "lowering", "derivative", "aten"},
                  {"rule", "lowering", "derivative", "aten"}),
    "Reduction": ({"entry", "attributes", "shape", "lowering", "derivative",
                   "aten"},
                  {"entry", "shape", "lowering"}),
    "View": ({"attributes", "shape", "remap", "strided", "sequence",
              "derivative", "aten"},
             {"shape", "remap", "strided", "derivative", "aten"}),
    "DataMovement": ({"arity", "attributes", "shape", "form", "indexed",
                      "derivative", "aten"},
                     {"arity", "shape", "form", "derivative", "aten"}),
    "Extern": ({"arity", "attributes", "shape", "keeps_channels_last",
                "starts_channels_last", "canonical", "decompose",
                "decomposes_when", "derivative", "aten"},
               {"arity", "shape"}),
    "Composite": ({"arity", "attributes", "decompose", "floating_only",
                   "derivative", "aten"},
                  {"arity", "decompose"}),
}
VIEW_FORMS = {"Random", "LowerTriangle", "UpperTriangle", "Pad", "Concat",
              "IndexSelect", "Gather", "Embedding", "Arange", "Fill"}
REDUCE_KINDS = {"Sum", "Prod", "Max", "Min", "Any", "All", "ArgMax", "ArgMin"}


class DefinitionError(Exception):
    pass


class Rule:
    """derivative=rule("expr"): a DerivativeInfo expression in C++."""

    def __init__(self, expression):
        self.expression = expression


class Replay:
    """aten=replay("name"): a ReplayRule of TorchGraphReplay.cpp."""

    def __init__(self, name):
        self.name = name


class OpDefinition:
    def __init__(self, name, family, facets, where):
        self.name = name
        self.family = family
        self.facets = facets
        self.where = where

    @property
    def key(self):
        return camel(self.name)

    def fail(self, message):
        raise DefinitionError(f"{self.where}: op '{self.name}': {message}")


def load_family(path, family):
    ops = []

    def op(name, **facets):
        frame = sys._getframe(1)
        where = f"{path}:{frame.f_lineno}"
        if not isinstance(name, str) or not name.replace("_", "").isalnum() \
                or not name[:1].isalpha() or name != name.lower():
            raise DefinitionError(f"{where}: '{name}' is not an op name "
                                  "(lower case, digits and underscores)")
        definition = OpDefinition(name, family, facets, where)
        allowed, required = FACETS[family]
        for facet in facets:
            if facet not in allowed:
                definition.fail(f"unknown facet '{facet}' for a {family} op")
        for facet in sorted(required - set(facets)):
            definition.fail(f"needs the facet '{facet}'")
        ops.append(definition)

    scope = {"op": op, "rule": Rule, "replay": Replay, "__file__": str(path)}
    code = compile(path.read_text(), str(path), "exec")
    exec(code, scope)  # the definitions are this repository's own files
    return ops


def camel(name):
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def cxx_string_list(items):
    return "{" + ", ".join(f'"{item}"' for item in items) + "}"


def cxx_number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    return repr(value)


class FormulaTranslator:
    """A derivative formula (Python syntax) as the body of a C++ lambda that
    builds it with GradBuilder::emit, nested as written (operands are
    built left to right, as C++ evaluates a braced list)."""

    def __init__(self, definition, names, op_names):
        self.definition = definition
        self.names = set(names)
        self.op_names = op_names

    def fail(self, message):
        self.definition.fail(f"derivative: {message}")

    def body(self, formula):
        try:
            module = ast.parse(formula)
        except SyntaxError as error:
            self.fail(f"not a formula ({error.msg})")
        lines = []
        statements = module.body
        if not statements or not isinstance(statements[-1], ast.Expr):
            self.fail("must end with the gradient's expression")
        for statement in statements[:-1]:
            if not (isinstance(statement, ast.Assign) and
                    len(statement.targets) == 1 and
                    isinstance(statement.targets[0], ast.Name)):
                self.fail("only 'name = expression' comes before the gradient")
            name = statement.targets[0].id
            if name in self.names:
                self.fail(f"'{name}' is assigned twice")
            lines.append(f"Value *{name} = {self.expression(statement.value)};")
            self.names.add(name)
        lines.append(f"return {self.expression(statements[-1].value)};")
        return " ".join(lines)

    def expression(self, node):
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                self.fail(f"unknown name '{node.id}'")
            return node.id
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                self.fail(f"constant {node.value!r} is not a number")
            return f"number({cxx_number(node.value)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            if isinstance(node.operand, ast.Constant):
                return f"number({cxx_number(-node.operand.value)})"
            return self.emit("neg", [node.operand], [])
        if isinstance(node, ast.BinOp):
            ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
            if type(node.op) not in ops:
                self.fail("only + - * / are operators")
            return self.emit(ops[type(node.op)], [node.left, node.right], [])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            function = node.func.id
            if function == "attr":
                name, fallback = self.constants(node, 2)
                return f'number(floatAttr(node, "{name}", {cxx_number(fallback)}))'
            if function == "cpp":
                (text,) = self.constants(node, 1)
                return f"number({text})"
            return self.emit(function, node.args, node.keywords)
        self.fail(f"cannot translate '{ast.unparse(node)}'")

    def constants(self, call, count):
        if len(call.args) != count or call.keywords or \
                not all(isinstance(arg, ast.Constant) for arg in call.args):
            self.fail(f"{call.func.id}(...) takes {count} constants")
        return [arg.value for arg in call.args]

    def emit(self, op, operands, keywords):
        if op not in self.op_names:
            self.fail(f"'{op}' is not an op")
        parts = ", ".join(self.expression(operand) for operand in operands)
        text = f"b.emit(Op::{camel(op)}, {{{parts}}}"
        if keywords:
            attributes = []
            for keyword in keywords:
                if not isinstance(keyword.value, ast.Constant):
                    self.fail(f"attribute '{keyword.arg}' must be a constant")
                attributes.append(
                    f'{{"{keyword.arg}", {cxx_number(keyword.value.value)}}}')
            text += ", {" + ", ".join(attributes) + "}"
        return text + ")"


def reduction_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        if facets["entry"] not in ("reduction", "extremeReduction"):
            definition.fail(f"unknown entry '{facets['entry']}'")
        attributes = cxx_string_list(facets.get("attributes", []))
        lines.append(f"table.push_back({facets['entry']}(Op::{definition.key}, "
                     f"{attributes}, {facets['shape']}));")
    return lines


def view_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        strided = facets["strided"] or "nullptr"
        entry = (f"remapView(Op::{definition.key}, "
                 f"{cxx_string_list(facets.get('attributes', []))}, "
                 f"{facets['shape']}, {facets['remap']}, {strided})")
        if facets.get("sequence"):
            entry = f"pieces({entry})"
        lines.append(f"table.push_back({entry});")
    return lines


def data_movement_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        if facets["form"] not in VIEW_FORMS:
            definition.fail(f"unknown view form '{facets['form']}'")
        arguments = [f"Op::{definition.key}", str(int(facets["arity"])),
                     cxx_string_list(facets.get("attributes", [])),
                     facets["shape"], f"ViewForm::{facets['form']}"]
        if "indexed" in facets:
            arguments.append(str(int(facets["indexed"])))
        lines.append(f"table.push_back(dataMovement({', '.join(arguments)}));")
    return lines


def composite_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        arguments = [f"Op::{definition.key}", str(int(facets["arity"])),
                     cxx_string_list(facets.get("attributes", [])),
                     facets["decompose"]]
        if not facets.get("floating_only", True):
            arguments.append("false")
        lines.append(f"table.push_back(composite({', '.join(arguments)}));")
    return lines


def entry_block(first, fields):
    """Statements adding one registry entry: `first` declares `info`, each
    field statement sets a field of it."""
    return (["{", f"  {first}"] + ["  " + field for field in fields] +
            ["  table.push_back(std::move(info));", "}"])


def extern_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        if ("decompose" in facets) != ("decomposes_when" in facets):
            definition.fail("decompose and decomposes_when come together")
        fields = []
        for facet, field in [("keeps_channels_last", "keepsChannelsLast"),
                             ("starts_channels_last", "startsChannelsLast")]:
            if facets.get(facet):
                fields.append(f"info.{field} = true;")
        for facet, field in [("canonical", "canonicalAttributes"),
                             ("decompose", "decompose"),
                             ("decomposes_when", "decomposesWhen")]:
            if facet in facets:
                fields.append(f"info.{field} = {facets[facet]};")
        entry = (f"externOp(Op::{definition.key}, {int(facets['arity'])}, "
                 f"{cxx_string_list(facets.get('attributes', []))}, {facets['shape']})")
        if not fields:
            lines.append(f"table.push_back({entry});")
            continue
        lines += entry_block(f"OpInfo info = {entry};", fields)
    return lines


def reduce_kinds(ops):
    lines = []
    for definition in ops:
        kind = definition.facets["lowering"]
        if kind not in REDUCE_KINDS:
            definition.fail(f"unknown ReduceKind '{kind}'")
        lines.append(f"kinds[Op::{definition.key}] = ReduceKind::{kind};")
    return lines


def registry_entries(ops):
    lines = []
    for definition in ops:
        facets = definition.facets
        rule = facets["rule"]
        if rule not in TYPE_RULES:
            definition.fail(f"unknown type rule '{rule}'")
        fields = [f"info.op = Op::{definition.key};"]
        arity = facets.get("arity", 1)
        if arity != 1:
            fields.append(f"info.arity = {int(arity)};")
        if rule != "Promote":
            fields.append(f"info.rule = TypeRule::{rule};")
        if facets.get("attributes"):
            fields.append(f"info.attributes = {cxx_string_list(facets['attributes'])};")
        if facets.get("optional_operands"):
            fields.append("info.optionalOperands = "
                          f"{cxx_string_list(facets['optional_operands'])};")
        for facet, field in [("condition_first", "conditionFirst"),
                             ("scalar_last", "scalarLast"), ("costly", "costlyMath")]:
            if facets.get(facet):
                fields.append(f"info.{field} = true;")
        if facets.get("verify"):
            fields.append(f"info.verify = {facets['verify']};")
        lines += entry_block("OpInfo info;", fields)
    return lines


def lowering_rules(ops):
    return [f"rules[Op::{d.key}] = {d.facets['lowering']};" for d in ops]


def derivative_entries(ops, op_names):
    lines = []
    for definition in ops:
        if "derivative" not in definition.facets:
            continue
        derivative = definition.facets["derivative"]
        key = f"table[Op::{definition.key}]"
        formulas = definition.family == "Pointwise"
        if isinstance(derivative, Rule):
            lines.append(f"{key} = {derivative.expression};")
        elif derivative == "none":
            lines.append(f"{key} = nonDifferentiable();")
        elif derivative == "decomposed" and definition.family == "Composite":
            lines.append(f"{key} = differentiatedByDecomposing();")
        elif derivative == "zero" and formulas:
            lines.append(f"{key} = zeroGradient();")
        elif isinstance(derivative, str) and formulas:
            body = FormulaTranslator(definition, ["g", "x", "y"], op_names).body(derivative)
            lines.append(f"{key} = unary([](GradBuilder &b, const Node &node, "
                         "Value *g, Operand x, Value *y) -> Value * { " + body + " });")
        elif isinstance(derivative, tuple) and len(derivative) == 2 and formulas:
            lambdas = []
            for formula in derivative:
                body = FormulaTranslator(definition, ["g", "x", "other", "y"],
                                         op_names).body(formula)
                lambdas.append("[](GradBuilder &b, Value *g, Operand x, Operand other, "
                               "Value *y) -> Value * { " + body + " }")
            lines.append(f"{key} = binary({lambdas[0]}, {lambdas[1]});")
        elif formulas:
            definition.fail("derivative must be a formula, a pair of them, "
                            '"zero", "none" or rule(...)')
        elif definition.family == "Composite":
            definition.fail('derivative must be rule(...), "decomposed" or "none"')
        else:
            definition.fail('derivative must be rule(...) or "none"')
    return lines


# The parameters of graph replay's rules (TorchGraphReplay.cpp) and of the
# extern ops' ATen calls (TorchExternOps.cpp), which an aten expression uses.
REPLAY_PARAMETERS = "const Node &node, const Tensors &t, const Symbols &s"
EXTERN_PARAMETERS = ("Op op, const Attributes &a, const Tensors &t, "
                     "const std::vector<int64_t> &sizes")


def aten_rules(ops, parameters):
    lines = []
    for definition in ops:
        if "aten" not in definition.facets:
            continue
        aten = definition.facets["aten"]
        key = f"table[Op::{definition.key}]"
        if isinstance(aten, Replay):
            lines.append(f"{key} = {aten.name};")
        elif isinstance(aten, str):
            lines.append(f"{key} = []({parameters}) {{ return Tensors{{{aten}}}; }};")
        else:
            definition.fail("aten must be an expression or replay(...)")
    return lines


BANNER = "// Generated by tools/dynafuse-opgen from include/dynafuse/Ops/{source}: edit that\n" \
         "// file, not this one.\n"


def write(path, source, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = BANNER.format(source=source) + "\n".join(lines) + "\n"
    path.write_text(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--definitions", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    try:
        families = [(name, kind, load_family(args.definitions / f"{name}.py", kind))
                    for name, kind in FAMILIES]
        every = [d for _, _, ops in families for d in ops]
        seen = {}
        for definition in every:
            if definition.name in seen:
                definition.fail(f"is defined twice (first at {seen[definition.name]})")
            seen[definition.name] = definition.where
        op_names = set(seen)
        ops_def = ["#ifndef DYNAFUSE_OP",
                   '#error "define DYNAFUSE_OP(ID, NAME) before including Ops.def"',
                   "#endif"]
        for name, kind, ops in families:
            ops_def.append(f"// {kind} ({name}.py)")
            ops_def += [f'DYNAFUSE_OP({d.key}, "{d.name}")' for d in ops]
        ops_def.append("#undef DYNAFUSE_OP")
        write(args.out / "dynafuse/Graph/Ops.def", "*Ops.py", ops_def)
        by_file = {name: ops for name, _, ops in families}
        views = by_file["ViewOps"] + by_file["CopyingRemapOps"] + by_file["DataMovementOps"]
        for path, source, lines in [
            ("PointwiseOps.inc", "PointwiseOps.py",
             registry_entries(by_file["PointwiseOps"])),
            ("PointwiseRules.inc", "PointwiseOps.py",
             lowering_rules(by_file["PointwiseOps"])),
            ("PointwiseDerivatives.inc", "PointwiseOps.py",
             derivative_entries(by_file["PointwiseOps"], op_names)),
            ("PointwiseReplays.inc", "PointwiseOps.py",
             aten_rules(by_file["PointwiseOps"], REPLAY_PARAMETERS)),
            ("ReductionOps.inc", "ReductionOps.py",
             reduction_entries(by_file["ReductionOps"])),
            ("ReductionKinds.inc", "ReductionOps.py",
             reduce_kinds(by_file["ReductionOps"])),
            ("ReductionDerivatives.inc", "ReductionOps.py",
             derivative_entries(by_file["ReductionOps"], op_names)),
            ("ReductionReplays.inc", "ReductionOps.py",
             aten_rules(by_file["ReductionOps"], REPLAY_PARAMETERS)),
            ("ViewOps.inc", "ViewOps.py", view_entries(by_file["ViewOps"])),
            ("CopyingRemapOps.inc", "CopyingRemapOps.py",
             view_entries(by_file["CopyingRemapOps"])),
            ("DataMovementOps.inc", "DataMovementOps.py",
             data_movement_entries(by_file["DataMovementOps"])),
            ("ViewDerivatives.inc", "*Ops.py", derivative_entries(views, op_names)),
            ("ViewReplays.inc", "*Ops.py", aten_rules(views, REPLAY_PARAMETERS)),
            ("ExternOps.inc", "ExternOps.py", extern_entries(by_file["ExternOps"])),
            ("ExternDerivatives.inc", "ExternOps.py",
             derivative_entries(by_file["ExternOps"], op_names)),
            ("ExternAten.inc", "ExternOps.py",
             aten_rules(by_file["ExternOps"], EXTERN_PARAMETERS)),
            ("CompositeOps.inc", "CompositeOps.py",
             composite_entries(by_file["CompositeOps"])),
            ("CompositeDerivatives.inc", "CompositeOps.py",
             derivative_entries(by_file["CompositeOps"], op_names)),
            ("CompositeReplays.inc", "CompositeOps.py",
             aten_rules(by_file["CompositeOps"], REPLAY_PARAMETERS)),
        ]:
            write(args.out / "dynafuse/Ops" / path, source, lines)
    except DefinitionError as error:
        print(f"dynafuse-opgen: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
