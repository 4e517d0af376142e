# The CUDA backend needs only headers at build time (cuda.h for the driver
# API types, cuda_fp16.h/cuda_bf16.h for NVRTC); NVRTC and libcuda are
# dlopen'ed at run time. DYNAFUSE_NVRTC_LIBRARY is the NVRTC tried after
# $DYNAFUSE_NVRTC and before the soname libnvrtc.so.13.
file(GLOB _dynafuse_venv_cuda
  ${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cu13)
find_path(DYNAFUSE_CUDA_INCLUDE_DIR cuda.h
  HINTS $ENV{CUDA_HOME}/include /usr/local/cuda-13.0/include
        /usr/local/cuda/include)
find_library(DYNAFUSE_NVRTC_LIBRARY NAMES libnvrtc.so.13 nvrtc
  HINTS $ENV{CUDA_HOME}/lib64 /usr/local/cuda-13.0/lib64
        /usr/local/cuda/lib64 ${_dynafuse_venv_cuda}/lib)
if(NOT DYNAFUSE_NVRTC_LIBRARY)
  set(DYNAFUSE_NVRTC_LIBRARY "")
endif()
set(DYNAFUSE_CUDA_INCLUDE_DIRS ${DYNAFUSE_CUDA_INCLUDE_DIR})
message(STATUS "CUDA backend: headers ${DYNAFUSE_CUDA_INCLUDE_DIR}, "
  "NVRTC '${DYNAFUSE_NVRTC_LIBRARY}' (else $DYNAFUSE_NVRTC or libnvrtc.so.13)")
