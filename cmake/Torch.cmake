# Finds the CPython being built against (3.11, 3.12 or 3.13, with the GIL)
# and the PyTorch installed beside it, whatever its release (2.11 on). Torch
# is linked by explicit library paths: find_package(Torch) from the CUDA wheel
# goes looking for a CUDA toolkit. Torch must use the C++11 ABI, like
# Debian's LLVM.
find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
if(Python_VERSION VERSION_LESS 3.11 OR Python_VERSION VERSION_GREATER_EQUAL 3.14)
  message(FATAL_ERROR "Dynafuse's frame hook and bytecode interpreter support "
    "CPython 3.11, 3.12 and 3.13; ${Python_EXECUTABLE} is ${Python_VERSION}. "
    "Build with one of those (for example: python3.12 -m venv .venv-3.12).")
endif()
execute_process(
  COMMAND ${Python_EXECUTABLE} -c
    "import sysconfig; print(int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))"
  OUTPUT_VARIABLE python_free_threaded OUTPUT_STRIP_TRAILING_WHITESPACE)
if(python_free_threaded STREQUAL "1")
  message(FATAL_ERROR "${Python_EXECUTABLE} is a free-threaded build "
    "(Py_GIL_DISABLED); Dynafuse's frame hook needs a CPython with the GIL.")
endif()
message(STATUS "CPython ${Python_VERSION} from ${Python_EXECUTABLE}")

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
