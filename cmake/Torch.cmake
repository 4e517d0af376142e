# Finds CPython 3.11 and the PyTorch installed beside it. Torch is linked by
# explicit library paths: find_package(Torch) from the CUDA wheel goes looking
# for a CUDA toolkit. Torch must use the C++11 ABI, like Debian's LLVM.
find_package(Python 3.11 EXACT REQUIRED COMPONENTS Interpreter Development.Module)

execute_process(
  COMMAND ${Python_EXECUTABLE} -c
    "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE torch_info
  RESULT_VARIABLE torch_status
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_status EQUAL 0)
  message(FATAL_ERROR "PyTorch is not importable by ${Python_EXECUTABLE}")
endif()
string(REPLACE "\n" ";" torch_info "${torch_info}")
list(GET torch_info 0 torch_dir)
list(GET torch_info 1 DYNAFUSE_TORCH_VERSION)
list(GET torch_info 2 torch_cxx11_abi)
if(NOT torch_cxx11_abi EQUAL 1)
  message(FATAL_ERROR "PyTorch ${DYNAFUSE_TORCH_VERSION} was built without "
    "_GLIBCXX_USE_CXX11_ABI=1; Dynafuse links LLVM, which uses the C++11 ABI")
endif()
message(STATUS "PyTorch ${DYNAFUSE_TORCH_VERSION} from ${torch_dir}")

set(DYNAFUSE_TORCH_LIBRARY_DIR ${torch_dir}/lib)
set(DYNAFUSE_TORCH_INCLUDE_DIRS ${torch_dir}/include
  ${torch_dir}/include/torch/csrc/api/include)
set(DYNAFUSE_TORCH_LIBRARIES)
foreach(lib torch torch_cpu c10 torch_python)
  set(path ${DYNAFUSE_TORCH_LIBRARY_DIR}/lib${lib}.so)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "missing ${path}")
  endif()
  list(APPEND DYNAFUSE_TORCH_LIBRARIES ${path})
endforeach()
