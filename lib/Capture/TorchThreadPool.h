//===- TorchThreadPool.h - Kernels on torch's intra-op threads --*- C++ -*-===//
#ifndef DYNAFUSE_CAPTURE_TORCHTHREADPOOL_H
#define DYNAFUSE_CAPTURE_TORCHTHREADPOOL_H

namespace dynafuse {

/// Makes torch's intra-op thread pool the one parallel kernels run on,
/// unless DYNAFUSE_NUM_THREADS is set (then Dynafuse's own pool of that
/// size stays).
void useTorchThreadPool();

} // namespace dynafuse

#endif
