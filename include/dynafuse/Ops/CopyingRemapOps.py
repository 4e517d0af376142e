# CopyingRemapOps.py - The definitions of flip, roll and repeat.
#
# Views that remap indices but have no strided form: their results are
# always copies (Graph/CopyingRemapOps.cpp holds the rules they name). The
# facets are ViewOps.py's.

op("flip", attributes=["dims"], shape="inferFlip", remap="remapFlip",
   strided=None, derivative=rule("single(flipGradient)"),
   aten='t[0].flip(intListAttr(node, "dims", {}))')
op("roll", attributes=["shifts", "dims"], shape="inferRoll",
   remap="remapRoll", strided=None, derivative=rule("single(rollGradient)"),
   aten='t[0].roll(intListAttr(node, "shifts", {}), intListAttr(node, "dims", {}))')
op("repeat", attributes=["repeats"], shape="inferRepeat",
   remap="remapRepeat", strided=None,
   derivative=rule("single(repeatGradient)"),
   aten='t[0].repeat(evaluateAll(symListAttr(node, "repeats", {}), s))')
