//===- TorchThreadPool.h - Kernels on torch's intra-op threads --*- C++ -*-===//
#ifndef DYNAFUSE_CAPTURE_TORCHTHREADPOOL_H
#define DYNAFUSE_CAPTURE_TORCHTHREADPOOL_H

namespace dynafuse {

/// Makes torch's intra-op thread pool the one parallel kernels run on,
/// unless `numThreads` (Options::numThreads) is at least 1: then Dynafuse's
/// own pool (configureThreadPool) is used.
void useTorchThreadPool(int numThreads);

} // namespace dynafuse

#endif
