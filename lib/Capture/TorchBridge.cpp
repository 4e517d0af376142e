//===- TorchBridge.cpp - What capture needs from PyTorch ------------------===//
#include "TorchBridge.h"

#include "PyRef.h"

#include "dynafuse/Runtime/CachingAllocator.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdlib>
#include <cstring>

namespace dynafuse {
namespace {

std::optional<DType> fromScalarType(at::ScalarType type) {
  switch (type) {
  case at::kBool:
    return DType::Bool;
  case at::kInt:
    return DType::I32;
  case at::kLong:
    return DType::I64;
  case at::kHalf:
    return DType::F16;
  case at::kBFloat16:
    return DType::BF16;
  case at::kFloat:
    return DType::F32;
  case at::kDouble:
    return DType::F64;
  default:
    return std::nullopt;
  }
}

at::ScalarType toScalarType(DType type) {
  switch (type) {
  case DType::Bool:
    return at::kBool;
  case DType::I32:
    return at::kInt;
  case DType::I64:
    return at::kLong;
  case DType::F16:
    return at::kHalf;
  case DType::BF16:
    return at::kBFloat16;
  case DType::F32:
    return at::kFloat;
  case DType::F64:
    return at::kDouble;
  }
  return at::kFloat;
}

PyTypeObject *parameterType() {
  static PyObject *slot = nullptr;
  return reinterpret_cast<PyTypeObject *>(
      lookupOnce(slot, "torch.nn.parameter", "Parameter"));
}

} // namespace

PyObject *tensorClass() { return THPVariableClass; }

bool isAnyTensor(PyObject *object) { return THPVariable_Check(object); }

bool isPlainTensor(PyObject *object) {
  PyTypeObject *type = Py_TYPE(object);
  return type == reinterpret_cast<PyTypeObject *>(THPVariableClass) ||
         type == parameterType();
}

TensorMeta describeTensor(PyObject *object) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  TensorMeta meta;
  meta.scalarType = static_cast<int>(tensor.scalar_type());
  meta.dtype = fromScalarType(tensor.scalar_type());
  meta.dtypeName = c10::toString(tensor.scalar_type());
  meta.device = tensor.device().str();
  meta.deviceType = static_cast<int>(tensor.device().type());
  meta.deviceIndex = tensor.device().index();
  meta.sizes = tensor.sizes().vec();
  meta.strides = tensor.strides().vec();
  meta.requiresGrad = tensor.requires_grad();
  meta.data = static_cast<char *>(tensor.unsafeGetTensorImpl()->has_storage()
                                      ? tensor.data_ptr()
                                      : nullptr);
  return meta;
}

bool tensorMatches(PyObject *object, const TensorMeta &expected) {
  if (!isPlainTensor(object))
    return false;
  const at::Tensor &tensor = THPVariable_Unpack(object);
  c10::Device device = tensor.device();
  return static_cast<int>(tensor.scalar_type()) == expected.scalarType &&
         tensor.sizes().equals(expected.sizes) &&
         tensor.strides().equals(expected.strides) &&
         tensor.requires_grad() == expected.requiresGrad &&
         static_cast<int>(device.type()) == expected.deviceType &&
         device.index() == expected.deviceIndex;
}

void tensorView(PyObject *object, char **data, std::vector<int64_t> &sizes,
                std::vector<int64_t> &strides) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  *data = static_cast<char *>(tensor.unsafeGetTensorImpl()->has_storage()
                                  ? tensor.data_ptr()
                                  : nullptr);
  sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  strides.assign(tensor.strides().begin(), tensor.strides().end());
}

/// CPU tensors Dynafuse creates take their memory from the runtime's
/// caching allocator (DESIGN decision 10); torch's storage returns the
/// block through the deleter when it frees it. Options::cachingAllocator
/// off (DYNAFUSE_CACHING_ALLOCATOR=0) uses at::empty instead.
struct PoolAllocator final : c10::Allocator {
  static void returnBlock(void *block) {
    CachingAllocator::global().release(block);
  }
  c10::DataPtr allocate(size_t bytes) override {
    void *block = CachingAllocator::global().allocate(bytes);
    return {block, block, &returnBlock, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &returnBlock; }
  void copy_data(void *dest, const void *src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

/// What installTorchAllocators set from the Options (once, at load).
struct TorchAllocatorSettings {
  /// Options::cachingAllocator, or guard pages (which must see every
  /// tensor Dynafuse makes).
  bool pool = true;
  /// Options::guardPages == GuardPages::All.
  bool guardTorch = false;
};
static TorchAllocatorSettings torchAllocatorSettings;

/// The pool, or null with the caching allocator off.
static PoolAllocator *poolAllocator() {
  static PoolAllocator *pool =
      torchAllocatorSettings.pool ? new PoolAllocator() : nullptr;
  return pool;
}

PyObject *newTensor(const std::vector<int64_t> &sizes, DType dtype,
                    const std::string &device, char **data) {
  PoolAllocator *pool = poolAllocator();
  at::Device where(device);
  at::Tensor tensor =
      pool && where.is_cpu()
          ? at::Tensor(at::detail::empty_generic(
                sizes, pool, c10::DispatchKeySet(c10::DispatchKey::CPU),
                toScalarType(dtype), std::nullopt))
          : at::empty(
                sizes,
                at::TensorOptions().dtype(toScalarType(dtype)).device(where));
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

/// Torch's CPU allocator while Dynafuse is loaded: on a thread that is
/// running a compiled graph (PooledTorchAllocations) it hands out pool
/// blocks, so ATen's results inside extern and call_torch steps (matmuls,
/// convolutions) do not page-fault on first touch; everywhere else it
/// forwards to the allocator it replaced. Installed once, at priority 0:
/// a later registration replaces it (and ATen's results then simply stop
/// being pooled). Tensors carry their deleter; raw deallocation asks the
/// pool whether it owns the block.
struct RunScopedAllocator final : c10::Allocator {
  static inline c10::Allocator *fallback = nullptr;
  static inline c10::DeleterFnPtr fallbackRawDeleter = nullptr;
  static inline thread_local int runDepth = 0;

  c10::DataPtr allocate(size_t bytes) override {
    return runDepth > 0 ? poolAllocator()->allocate(bytes)
                        : fallback->allocate(bytes);
  }
  static void rawDelete(void *block) {
    if (CachingAllocator::global().blockSize(block) != 0)
      CachingAllocator::global().release(block);
    else if (fallbackRawDeleter)
      fallbackRawDeleter(block);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &rawDelete; }
  void copy_data(void *dest, const void *src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

/// Whether ATen's allocations in a run are pooled: not with the pool off,
/// and not under guard pages (every block would be its own mapping; with
/// "all" the pool is torch's allocator anyway).
static bool poolsTorchResults() {
  return poolAllocator() && !CachingAllocator::globalUsesGuardPages();
}

static void installRunScopedAllocator() {
  if (!poolsTorchResults())
    return;
  static RunScopedAllocator *allocator = new RunScopedAllocator();
  RunScopedAllocator::fallback = c10::GetCPUAllocator();
  RunScopedAllocator::fallbackRawDeleter =
      RunScopedAllocator::fallback->raw_deleter();
  c10::SetCPUAllocator(allocator, /*priority=*/0);
}

PooledTorchAllocations::PooledTorchAllocations() {
  if (!RunScopedAllocator::fallback)
    return;
  ++RunScopedAllocator::runDepth;
  active = true;
}

PooledTorchAllocations::~PooledTorchAllocations() {
  if (active)
    --RunScopedAllocator::runDepth;
}

void installTorchAllocators(const Options &options) {
  torchAllocatorSettings.pool =
      options.cachingAllocator || options.guardPages != GuardPages::Off;
  torchAllocatorSettings.guardTorch = options.guardPages == GuardPages::All;
  if (torchAllocatorSettings.guardTorch) {
    c10::SetCPUAllocator(poolAllocator(), /*priority=*/100);
    return;
  }
  installRunScopedAllocator();
}

bool gradModeEnabled() { return at::GradMode::is_enabled(); }

bool autocastEnabled() {
  return at::autocast::is_autocast_enabled(at::kCPU) ||
         at::autocast::is_autocast_enabled(at::kCUDA);
}

bool defaultDtypeIsFloat32() {
  return at::get_default_dtype() == caffe2::TypeMeta::Make<float>();
}

std::optional<DType> dtypeFromObject(PyObject *object) {
  if (!THPDtype_Check(object))
    return std::nullopt;
  return fromScalarType(reinterpret_cast<THPDtype *>(object)->scalar_type);
}

} // namespace dynafuse

//===----------------------------------------------------------------------===//
// Extern ops
//===----------------------------------------------------------------------===//

namespace dynafuse {
namespace {

using Attributes = std::map<std::string, Attribute>;

std::vector<int64_t> ints(const Attributes &attributes, const std::string &name,
                          std::vector<int64_t> fallback) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  if (auto *list = std::get_if<std::vector<int64_t>>(&found->second))
    return *list;
  if (auto *value = std::get_if<int64_t>(&found->second))
    return {*value};
  fail("extern attribute '" + name + "' must be integers");
}

int64_t integer(const Attributes &attributes, const std::string &name,
                int64_t fallback) {
  return ints(attributes, name, {fallback}).at(0);
}

bool flag(const Attributes &attributes, const std::string &name) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return false;
  if (auto *value = std::get_if<bool>(&found->second))
    return *value;
  fail("extern attribute '" + name + "' must be true or false");
}

double number(const Attributes &attributes, const std::string &name,
              double fallback) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  if (auto *value = std::get_if<double>(&found->second))
    return *value;
  if (auto *value = std::get_if<int64_t>(&found->second))
    return double(*value);
  fail("extern attribute '" + name + "' must be a number");
}

at::Tensor view(const TensorArg &arg, const std::string &device) {
  return at::from_blob(arg.data, arg.sizes, arg.strides,
                       at::TensorOptions()
                           .dtype(toScalarType(arg.dtype))
                           .device(at::Device(device)));
}

at::Tensor callAten(const std::string &op, const Attributes &a,
                    const std::vector<at::Tensor> &t) {
  if (op == "mm")
    return at::mm(t[0], t[1]);
  if (op == "bmm")
    return at::bmm(t[0], t[1]);
  if (op == "matmul")
    return at::matmul(t[0], t[1]);
  if (op == "addmm")
    return at::addmm(t[0], t[1], t[2], number(a, "beta", 1),
                     number(a, "alpha", 1));
  if (op == "baddbmm")
    return at::baddbmm(t[0], t[1], t[2], number(a, "beta", 1),
                       number(a, "alpha", 1));
  if (op == "conv1d" || op == "conv2d") {
    size_t spatial = op == "conv1d" ? 1 : 2;
    auto perDim = [&](const char *name, int64_t fallback) {
      std::vector<int64_t> values = ints(a, name, {fallback});
      if (values.size() == 1)
        values.assign(spatial, values[0]);
      return values;
    };
    std::optional<at::Tensor> bias;
    if (t.size() > 2)
      bias = t[2];
    if (spatial == 1)
      return at::conv1d(t[0], t[1], bias, perDim("stride", 1),
                        perDim("padding", 0), perDim("dilation", 1),
                        integer(a, "groups", 1));
    return at::conv2d(t[0], t[1], bias, perDim("stride", 1),
                      perDim("padding", 0), perDim("dilation", 1),
                      integer(a, "groups", 1));
  }
  if (op == "max_pool2d")
    return at::max_pool2d(t[0], ints(a, "kernel_size", {1}),
                          ints(a, "stride", {}), ints(a, "padding", {0}),
                          ints(a, "dilation", {1}), flag(a, "ceil_mode"));
  if (op == "avg_pool2d") {
    std::optional<int64_t> divisor;
    if (a.count("divisor_override"))
      divisor = integer(a, "divisor_override", 1);
    bool includePad =
        !a.count("count_include_pad") || flag(a, "count_include_pad");
    return at::avg_pool2d(t[0], ints(a, "kernel_size", {1}),
                          ints(a, "stride", {}), ints(a, "padding", {0}),
                          flag(a, "ceil_mode"), includePad, divisor);
  }
  if (op == "adaptive_avg_pool2d")
    return at::adaptive_avg_pool2d(t[0], ints(a, "output_size", {1}));
  fail("no ATen implementation for extern op '" + op + "'");
}

} // namespace

/// Whether strides are the channels-last strides of NCHW sizes.
static bool isChannelsLastLayout(const std::vector<int64_t> &sizes,
                                 const std::vector<int64_t> &strides) {
  if (sizes.size() != 4 || strides.size() != 4)
    return false;
  int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  return strides == std::vector<int64_t>{h * w * c, 1, w * c, c};
}

PyObject *runExternOp(const std::string &op, const Attributes &attributes,
                      const std::vector<TensorArg> &args,
                      const TensorArg &expected, const std::string &device,
                      char **data) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> tensors;
  for (const TensorArg &arg : args)
    tensors.push_back(view(arg, device));
  at::Tensor result;
  try {
    // A convolution the lowering laid out channels-last gets its input in
    // that layout (a copy for the network's first one), so oneDNN takes
    // its NHWC path and returns the layout declared.
    if (op == "conv2d" &&
        isChannelsLastLayout(expected.sizes, expected.strides) &&
        !tensors[0].is_contiguous(at::MemoryFormat::ChannelsLast))
      tensors[0] = tensors[0].contiguous(at::MemoryFormat::ChannelsLast);
    result = callAten(op, attributes, tensors);
  } catch (const c10::Error &error) {
    fail("extern " + op + " failed: " + error.what_without_backtrace());
  }
  if (!result.sizes().equals(expected.sizes))
    fail("extern " + op + " produced sizes that differ from its declared type");
  if (result.scalar_type() != toScalarType(expected.dtype))
    result = result.to(toScalarType(expected.dtype));
  bool guard = CachingAllocator::globalUsesGuardPages() && result.is_cpu();
  if (guard || !result.strides().equals(expected.strides)) {
    // The declared layout (channels-last stays channels-last), and under
    // guard pages a guarded block, so kernels reading past its end fault.
    at::Tensor laidOut =
        guard ? at::Tensor(at::detail::empty_strided_generic(
                    expected.sizes, expected.strides, poolAllocator(),
                    c10::DispatchKeySet(c10::DispatchKey::CPU),
                    result.scalar_type()))
              : at::empty_strided(expected.sizes, expected.strides,
                                  result.options());
    laidOut.copy_(result);
    result = std::move(laidOut);
  }
  *data = static_cast<char *>(result.data_ptr());
  return THPVariable_Wrap(std::move(result));
}

PyObject *newMetaTensor(const TensorType &type) {
  std::vector<int64_t> sizes, strides;
  for (const SymExpr &size : type.sizes)
    sizes.push_back(size.constant());
  for (const SymExpr &stride : type.strides)
    strides.push_back(stride.constant());
  auto options =
      at::TensorOptions().dtype(toScalarType(type.dtype)).device(at::kMeta);
  return THPVariable_Wrap(strides.empty()
                              ? at::empty(sizes, options)
                              : at::empty_strided(sizes, strides, options));
}

PyObject *wrapTensorView(const TensorArg &arg, const std::string &device) {
  return THPVariable_Wrap(view(arg, device));
}

PyObject *viewOfTensor(PyObject *base, const std::vector<int64_t> &sizes,
                       const std::vector<int64_t> &strides, int64_t offset) {
  const at::Tensor &tensor = THPVariable_Unpack(base);
  return THPVariable_Wrap(
      tensor.as_strided(sizes, strides, tensor.storage_offset() + offset));
}

bool tensorsShareStorage(PyObject *a, PyObject *b) {
  if (!THPVariable_Check(a) || !THPVariable_Check(b))
    return false;
  return THPVariable_Unpack(a).is_alias_of(THPVariable_Unpack(b));
}

void copyIntoTensor(PyObject *dst, PyObject *src) {
  at::NoGradGuard noGrad;
  THPVariable_Unpack(dst).copy_(THPVariable_Unpack(src));
}

std::vector<int64_t> permutedDenseStrides(PyObject *object) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  if (tensor.dim() == 0 || tensor.numel() <= 1 || tensor.is_contiguous() ||
      !tensor.is_non_overlapping_and_dense())
    return {};
  return tensor.strides().vec();
}

bool tensorIsView(PyObject *object) {
  return THPVariable_Unpack(object).is_view();
}

PyObject *adoptTorchResult(PyObject *result,
                           const std::vector<PyObject *> &inputs,
                           const TensorArg &expected, char **data) {
  at::NoGradGuard noGrad;
  at::Tensor tensor = THPVariable_Unpack(result);
  for (PyObject *input : inputs)
    if (tensor.is_alias_of(THPVariable_Unpack(input)))
      tensor = tensor.clone();
  if (!tensor.sizes().equals(expected.sizes))
    fail("returned sizes that differ from the ones found at capture");
  if (!tensor.strides().equals(expected.strides)) {
    // The layout capture declared (meta kernels may differ from real ones).
    at::Tensor laidOut =
        at::empty_strided(expected.sizes, expected.strides, tensor.options());
    laidOut.copy_(tensor);
    tensor = std::move(laidOut);
  }
  if (tensor.scalar_type() != toScalarType(expected.dtype))
    fail("returned a dtype that differs from the one found at capture");
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

} // namespace dynafuse

namespace dynafuse {

PyObject *newStridedTensor(const std::vector<int64_t> &sizes,
                           const std::vector<int64_t> &strides, DType dtype,
                           const std::string &device, char **data) {
  if (CachingAllocator::globalUsesGuardPages() && at::Device(device).is_cpu()) {
    // The storage spans exactly the strided layout, ending at a guard page.
    at::Tensor tensor(at::detail::empty_strided_generic(
        sizes, strides, poolAllocator(),
        c10::DispatchKeySet(c10::DispatchKey::CPU), toScalarType(dtype)));
    *data = static_cast<char *>(tensor.data_ptr());
    return THPVariable_Wrap(std::move(tensor));
  }
  at::Tensor tensor = at::empty_strided(sizes, strides,
                                        at::TensorOptions()
                                            .dtype(toScalarType(dtype))
                                            .device(at::Device(device)));
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

bool isCudaTensor(PyObject *object) {
  return THPVariable_Check(object) && THPVariable_Unpack(object).is_cuda();
}

void *currentTorchCudaStream() {
  static PyObject *currentStream = nullptr;
  PyObject *function =
      lookupOnce(currentStream, "torch.cuda", "current_stream");
  if (!function)
    fail("torch.cuda.current_stream is not available");
  // Device 0's stream whatever torch's current device is: the cuda backend
  // runs tensors on cuda:0.
  PyRef device = PyRef::steal(PyLong_FromLong(0));
  PyRef stream = PyRef::steal(PyObject_CallOneArg(function, device.get()));
  PyRef handle = PyRef::steal(
      stream ? PyObject_GetAttrString(stream.get(), "cuda_stream") : nullptr);
  if (!handle) {
    PyErr_Clear();
    fail("cannot read torch's current CUDA stream");
  }
  void *pointer = PyLong_AsVoidPtr(handle.get());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail("torch's current CUDA stream is not a handle");
  }
  return pointer;
}

} // namespace dynafuse
