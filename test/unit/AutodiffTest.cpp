//===- AutodiffTest.cpp - Gradients against finite differences ------------===//
//
// Each case is a small f64 graph ending in a scalar. Its forward and
// backward graphs (differentiateGraph) run on the reference interpreter, and
// the gradient of the first input must match central differences of the
// original graph, element by element: the derivative rules are checked
// without PyTorch, in the core build.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Graph/Derivatives.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Runtime/CompileGraph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace dynafuse;

namespace {

using Buffers = std::vector<std::vector<double>>;

int64_t numel(const TensorType &type) {
  int64_t count = 1;
  for (const SymExpr &size : type.sizes)
    count *= size.constant();
  return count;
}

std::vector<int64_t> sizesOf(const TensorType &type) {
  std::vector<int64_t> sizes;
  for (const SymExpr &size : type.sizes)
    sizes.push_back(size.constant());
  return sizes;
}

std::vector<int64_t> rowMajor(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;)
    strides[k - 1] = strides[k] * sizes[k];
  return strides;
}

/// Runs a compiled graph on row-major f64 buffers; returns its outputs as
/// row-major buffers.
Buffers run(const CompiledGraph &compiled, const Graph &graph,
            Buffers &inputs) {
  std::vector<TensorArg> args;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    std::vector<int64_t> sizes = sizesOf(graph.inputs[i]->type);
    args.push_back({reinterpret_cast<char *>(inputs[i].data()), sizes,
                    rowMajor(sizes)});
  }
  HostContext context;
  std::vector<TensorArg> results = compiled.compiled->run(args, context);
  Buffers outputs;
  for (size_t j = 0; j < graph.outputs.size(); ++j) {
    const TensorArg &arg = results.at(j);
    std::vector<double> values(size_t(numel(graph.outputs[j]->type)));
    std::vector<int64_t> sizes = arg.sizes;
    for (size_t flat = 0; flat < values.size(); ++flat) {
      int64_t offset = 0, rest = int64_t(flat);
      for (size_t k = sizes.size(); k-- > 0;) {
        offset += (rest % sizes[k]) * arg.strides[k];
        rest /= sizes[k];
      }
      values[flat] = reinterpret_cast<const double *>(arg.data)[offset];
    }
    outputs.push_back(std::move(values));
  }
  return outputs;
}

CompiledGraph compile(const Graph &graph) {
  registerBuiltinBackends();
  GraphCompileOptions options;
  options.backendName = "interp";
  return compileGraph(graph, options);
}

/// Checks d(output 0)/d(input 0) of `text` against central differences.
void checkGradient(const std::string &text, double tolerance = 1e-6) {
  SCOPED_TRACE(text);
  std::unique_ptr<Graph> graph = parseGraph(text);
  std::vector<bool> flags(graph->inputs.size(), false);
  flags[0] = true;
  TrainingGraphs pair = differentiateGraph(*graph, flags);
  ASSERT_EQ(pair.gradientOf, std::vector<int>{0});
  CompiledGraph original = compile(*graph);
  CompiledGraph forward = compile(*pair.forward);
  CompiledGraph backward = compile(*pair.backward);

  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1.5, 1.5);
  Buffers inputs;
  for (const Value *input : graph->inputs) {
    std::vector<double> values(size_t(numel(input->type)));
    for (double &value : values)
      value = dist(rng);
    inputs.push_back(std::move(values));
  }
  Buffers forwardOutputs = run(forward, *pair.forward, inputs);
  Buffers backwardInputs;
  for (const TrainingGraphs::BackwardInput &input : pair.backwardInputs) {
    using Kind = TrainingGraphs::BackwardInput::Kind;
    if (input.kind == Kind::ForwardInput)
      backwardInputs.push_back(inputs[size_t(input.index)]);
    else if (input.kind == Kind::ForwardOutput)
      backwardInputs.push_back(forwardOutputs[size_t(input.index)]);
    else
      backwardInputs.push_back({1.0}); // d(loss)/d(loss)
  }
  std::vector<double> gradient =
      run(backward, *pair.backward, backwardInputs).at(0);
  ASSERT_EQ(gradient.size(), inputs[0].size());

  const double step = 1e-6;
  for (size_t i = 0; i < inputs[0].size(); ++i) {
    Buffers shifted = inputs;
    shifted[0][i] += step;
    double up = run(original, *graph, shifted)[0][0];
    shifted[0][i] -= 2 * step;
    double down = run(original, *graph, shifted)[0][0];
    double expected = (up - down) / (2 * step);
    EXPECT_NEAR(gradient[i], expected,
                tolerance * std::max(1.0, std::fabs(expected)))
        << "element " << i;
  }
}

/// A graph of x [3, 4] (and a weight w [3, 4]): loss = sum(BODY * w),
/// where BODY is one op of x producing %y of `type`.
std::string weighted(const std::string &body, const std::string &type) {
  return "graph @f(%x: f64[3, 4], %w: " + type + ") {\n  %y = " + body +
         " : " + type + "\n  %p = mul %y, %w : " + type +
         "\n  %l = sum %p : f64[]\n  return %l\n}\n";
}

} // namespace

TEST(Autodiff, PointwiseRulesMatchFiniteDifferences) {
  for (Op op : {Op::Exp, Op::Tanh, Op::Sigmoid, Op::Sin, Op::Cos, Op::Erf,
                Op::Neg, Op::Square, Op::Expm1, Op::Relu, Op::Silu, Op::Abs})
    checkGradient(weighted(opName(op) + " %x", "f64[3, 4]"));
  checkGradient(weighted("gelu %x", "f64[3, 4]"));
  checkGradient(weighted("gelu %x {approximate = \"tanh\"}", "f64[3, 4]"));
  checkGradient(weighted("pow %x, 3", "f64[3, 4]"));
  checkGradient(weighted("leaky_relu %x {negative_slope = 0.2}", "f64[3, 4]"));
  checkGradient(weighted("hardtanh %x {min_val = -0.5, max_val = 0.5}",
                         "f64[3, 4]"));
  checkGradient(weighted("div 1.0, %x", "f64[3, 4]"), 1e-5);
  checkGradient(weighted("elu %x {alpha = 0.7}", "f64[3, 4]"));
  checkGradient(weighted("softplus %x {beta = 2.0, threshold = 1.5}", "f64[3, 4]"));
  checkGradient(weighted("mish %x", "f64[3, 4]"));
  // The uniform inputs in (-1.5, 1.5) stay off hardsigmoid's and
  // hardswish's kinks at +-3; scaled by 3 they cross them.
  for (Op op : {Op::Hardsigmoid, Op::Hardswish}) {
    checkGradient(weighted(opName(op) + " %x", "f64[3, 4]"));
    checkGradient("graph @f(%x: f64[3, 4]) {\n  %s = mul %x, 3.3 : f64[3, 4]\n"
                  "  %y = " +
                  opName(op) +
                  " %s : f64[3, 4]\n"
                  "  %q = mul %y, %y : f64[3, 4]\n"
                  "  %l = sum %q : f64[]\n  return %l\n}\n");
  }
}

TEST(Autodiff, BinaryRulesSumBroadcastOperandsBack) {
  // x [3, 4] against a row w [4]: both broadcast directions.
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Maximum, Op::Minimum}) {
    checkGradient(std::string("graph @f(%x: f64[3, 4], %r: f64[4]) {\n") +
                  "  %y = " + opName(op) + " %x, %r : f64[3, 4]\n" +
                  "  %l = sum %y : f64[]\n  return %l\n}\n");
    checkGradient(std::string("graph @f(%r: f64[4], %x: f64[3, 4]) {\n") +
                  "  %y = " + opName(op) + " %x, %r : f64[3, 4]\n" +
                  "  %s = mul %y, %y : f64[3, 4]\n" +
                  "  %l = sum %s : f64[]\n  return %l\n}\n");
  }
}

TEST(Autodiff, ReductionAndCompositeRules) {
  checkGradient(weighted("amax %x {dims = [1], keepdim = true}", "f64[3, 1]"));
  checkGradient(weighted("sum %x {dims = [0], keepdim = false}", "f64[4]"));
  checkGradient(weighted("mean %x {dims = [1], keepdim = false}", "f64[3]"));
  checkGradient(weighted("var %x {dims = [1], keepdim = false}", "f64[3]"));
  checkGradient(weighted("softmax %x {dim = 1}", "f64[3, 4]"));
  checkGradient(weighted("log_softmax %x {dim = 0}", "f64[3, 4]"));
  checkGradient(weighted("logsumexp %x {dims = [1], keepdim = false}", "f64[3]"));
  checkGradient(weighted(
      "layer_norm %x {normalized_shape = [4], eps = 1e-05, has_weight = false, "
      "has_bias = false}",
      "f64[3, 4]"));
  checkGradient(weighted(
      "rms_norm %x {normalized_shape = [4], eps = 1e-06, has_weight = false}",
      "f64[3, 4]"));
}

TEST(Autodiff, SelectingReductionsAndBatchNormInTraining) {
  checkGradient("graph @f(%x: f64[3, 4], %w: f64[3]) {\n"
                "  %v, %i = max_dim %x {dim = 1, keepdim = false} : f64[3], i64[3]\n"
                "  %p = mul %v, %w : f64[3]\n"
                "  %l = sum %p : f64[]\n  return %l\n}\n");
  checkGradient("graph @f(%x: f64[3, 4], %w: f64[1, 4]) {\n"
                "  %v, %i = min_dim %x {dim = 0, keepdim = true} : f64[1, 4], i64[1, 4]\n"
                "  %p = mul %v, %w : f64[1, 4]\n"
                "  %l = sum %p : f64[]\n  return %l\n}\n");
  checkGradient(weighted("repeat %x {repeats = [2, 1, 2]}", "f64[2, 3, 8]"));
  // The batch statistics reach no gradient (capture detaches them); the
  // input's, weight's and bias's gradients each in first place.
  const char *batchNorm =
      "  %y, %m, %v = batch_norm_train %x, %g, %b {eps = 1e-05, has_weight = "
      "true, has_bias = true} : f64[4, 3, 2], f64[3], f64[3]\n"
      "  %s = mul %y, %w : f64[4, 3, 2]\n"
      "  %l = sum %s : f64[]\n  return %l\n}\n";
  for (const char *inputs :
       {"%x: f64[4, 3, 2], %g: f64[3], %b: f64[3], %w: f64[4, 3, 2]",
        "%g: f64[3], %x: f64[4, 3, 2], %b: f64[3], %w: f64[4, 3, 2]",
        "%b: f64[3], %g: f64[3], %x: f64[4, 3, 2], %w: f64[4, 3, 2]"})
    checkGradient(std::string("graph @f(") + inputs + ") {\n" + batchNorm);
  checkGradient("graph @f(%x: f64[5, 2], %w: f64[5, 2]) {\n"
                "  %y, %m, %v = batch_norm_train %x {eps = 1e-05, has_weight = "
                "false, has_bias = false} : f64[5, 2], f64[2], f64[2]\n"
                "  %s = mul %y, %w : f64[5, 2]\n"
                "  %l = sum %s : f64[]\n  return %l\n}\n");
}

TEST(Autodiff, NormsDifferentiateTheirWeightsToo) {
  // The weight is the first input here.
  checkGradient("graph @f(%g: f64[4], %x: f64[3, 4], %b: f64[4]) {\n"
                "  %y = layer_norm %x, %g, %b {normalized_shape = [4], eps = "
                "1e-05, has_weight = true, has_bias = true} : f64[3, 4]\n"
                "  %s = mul %y, %y : f64[3, 4]\n"
                "  %l = sum %s : f64[]\n  return %l\n}\n");
}

TEST(Autodiff, ViewAndDataMovementRules) {
  checkGradient(weighted("transpose %x {dim0 = 0, dim1 = 1}", "f64[4, 3]"));
  checkGradient(weighted("permute %x {dims = [1, 0]}", "f64[4, 3]"));
  checkGradient(weighted("reshape %x {shape = [2, 6]}", "f64[2, 6]"));
  checkGradient(weighted("unsqueeze %x {dim = 1}", "f64[3, 1, 4]"));
  checkGradient(weighted("expand %x {shape = [2, 3, 4]}", "f64[2, 3, 4]"));
  checkGradient(weighted("select %x {dim = 1, index = 2}", "f64[3]"));
  checkGradient(
      weighted("slice %x {dim = 1, start = 1, end = 3, step = 1}", "f64[3, 2]"));
  checkGradient(weighted("flip %x {dims = [0]}", "f64[3, 4]"));
  checkGradient(weighted("roll %x {shifts = [1], dims = [1]}", "f64[3, 4]"));
  checkGradient(weighted("tril %x {diagonal = 0}", "f64[3, 4]"));
  checkGradient(weighted("pad %x {pad = [1, 2], value = 0.0}", "f64[3, 7]"));
  checkGradient(weighted("cat %x, %x {dim = 0}", "f64[6, 4]"));
  checkGradient("graph @f(%x: f64[3, 4]) {\n"
                "  %a, %b = split %x {dim = 1, size = 2} : f64[3, 2], f64[3, 2]\n"
                "  %c = mul %a, %b : f64[3, 2]\n"
                "  %l = sum %c : f64[]\n  return %l\n}\n");
  checkGradient("graph @f(%x: f64[3, 4], %m: bool[3, 4]) {\n"
                "  %y = where %m, %x, 0.5 : f64[3, 4]\n"
                "  %z = masked_fill %y, %m, 2.0 : f64[3, 4]\n"
                "  %s = mul %z, %y : f64[3, 4]\n"
                "  %l = sum %s : f64[]\n  return %l\n}\n");
}

TEST(Autodiff, EveryOpIsDifferentiableOrSaysWhyNot) {
  // Ops without an entry are the ones capture breaks before: list them so
  // a new op without a rule is a decision, not an accident.
  std::vector<std::string> missing;
  for (const std::string &op : registeredOpNames())
    if (!derivativeOf(*findOp(op)))
      missing.push_back(op);
  // The backward kernels themselves (double backward is not supported),
  // in-graph dropout
  // (capture emits training dropout as uniform + where), prod (zeros need
  // eager's special case), norm (its gradient at zero) and conv2d_bn
  // (inference graphs only: fuse-conv-epilogues runs on no training graph).
  std::vector<std::string> expected = {"adaptive_avg_pool2d_backward",
                                       "avg_pool2d_backward",
                                       "conv2d_bn",
                                       "conv_backward",
                                       "dropout",
                                       "embedding_backward",
                                       "gather_backward",
                                       "index_select_backward",
                                       "max_pool2d_backward",
                                       "norm",
                                       "prod",
                                       "sdpa_flash_backward"};
  std::sort(missing.begin(), missing.end());
  EXPECT_EQ(missing, expected);
}

TEST(Autodiff, TorchCallsDifferentiateThroughAGradientCallOfTheirCallable) {
  // sort's values reach the loss, its indices are integers; only %x of
  // the two operands requires grad.
  std::unique_ptr<Graph> graph =
      parseGraph(R"g(graph @g(%x: f32[3, 4], %w: f32[3, 4]) {
  %0, %1 = call_torch %x {call = 2, results = "f32[3, 4], i64[3, 4]", signature = "(%0, -1)", target = "torch.sort"} : f32[3, 4], i64[3, 4]
  %2 = mul %0, %w : f32[3, 4]
  %3 = sum %2 : f32[]
  return %3
})g");
  TrainingGraphs pair = differentiateGraph(*graph, {true, false});
  ASSERT_EQ(pair.gradientOf, std::vector<int>{0});
  const Node *gradient = nullptr;
  for (const auto &node : pair.backward->nodes)
    if (node->op == Op::CallTorch)
      gradient = node.get();
  ASSERT_NE(gradient, nullptr) << printGraph(*pair.backward);
  EXPECT_EQ(gradient->stringAttr("target", ""), "grad of torch.sort");
  EXPECT_EQ(*gradient->attribute("call"), Attribute(int64_t(2)));
  EXPECT_EQ(*gradient->attribute("grad_inputs"),
            Attribute(std::vector<int64_t>{0}));
  EXPECT_EQ(*gradient->attribute("grad_outputs"),
            Attribute(std::vector<int64_t>{0}));
  // the saved operand, then the values' gradient
  ASSERT_EQ(gradient->operands.size(), 2u);
  EXPECT_EQ(gradient->results.size(), 1u);
  EXPECT_EQ(gradient->result()->type.str(), "f32[3, 4]");
  // and it survives the text
  std::string text = printGraph(*pair.backward);
  EXPECT_EQ(printGraph(*parseGraph(text)), text);
}
