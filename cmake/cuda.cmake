# CUDA build (PYTFCOMM_WITH_CUDA=ON): the NCCL backend, GPU staging and DLPack
# support in libpytfcomm_core.
#
# Nothing CUDA is linked: libcuda.so.1 and libnccl.so.2 are dlopen'ed at run
# time (csrc/gpu/cuda_driver.cc, nccl_lib.cc), so the same build imports and
# runs its CPU paths on machines without a GPU. What the build needs:
#   - the CUDA toolkit (nvcc, cuda.h): found by CMake's FindCUDAToolkit
#     (CUDAToolkit_ROOT or CUDACXX point elsewhere than /usr/local/cuda);
#   - nccl.h: PYTFCOMM_NCCL_INCLUDE_DIR, else the nvidia-nccl-cu13/cu12 wheel
#     of the Python doing the build, else the system's.
# The few kernels (kernels.cu) are compiled by nvcc into a fatbin for
# PYTFCOMM_CUDA_ARCHS (plus PTX of the first, for newer GPUs) and embedded
# with bin2c; they are launched through the driver API.

find_package(CUDAToolkit REQUIRED)
set(PYTFCOMM_CUDA_ARCHS "75;80;90;100;120" CACHE STRING
    "GPU architectures of the embedded kernels (PTX of the first one is added)")
set(PYTFCOMM_NCCL_INCLUDE_DIR "" CACHE PATH "Directory holding nccl.h (default: search)")

# --- nccl.h ------------------------------------------------------------------
set(_nccl_hints ${PYTFCOMM_NCCL_INCLUDE_DIR})
if(NOT Python_EXECUTABLE)
  find_package(Python 3.9 COMPONENTS Interpreter)
endif()
if(Python_EXECUTABLE)
  execute_process(
    COMMAND ${Python_EXECUTABLE} -c
            "import importlib.util as u, os; s = u.find_spec('nvidia.nccl'); print(os.path.join(list(s.submodule_search_locations)[0], 'include'))"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _wheel_inc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0)
    list(APPEND _nccl_hints ${_wheel_inc})
  endif()
endif()
find_path(PYTFCOMM_NCCL_H_DIR nccl.h HINTS ${_nccl_hints} PATHS /usr/include /usr/local/include
          ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
if(NOT PYTFCOMM_NCCL_H_DIR)
  message(FATAL_ERROR "pytfcomm: PYTFCOMM_WITH_CUDA=ON needs nccl.h: pip install "
                      "nvidia-nccl-cu13 (or -cu12) into the building Python, apt-get install "
                      "libnccl-dev, or pass -DPYTFCOMM_NCCL_INCLUDE_DIR=...")
endif()
file(STRINGS ${PYTFCOMM_NCCL_H_DIR}/nccl.h _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*"
       "\\1.\\2.\\3" PYTFCOMM_NCCL_HEADER_VERSION_STRING "${_nccl_ver}")
set(PYTFCOMM_CUDA_VERSION_STRING ${CUDAToolkit_VERSION})
message(STATUS "pytfcomm: CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_NVCC_EXECUTABLE}), "
               "nccl.h ${PYTFCOMM_NCCL_HEADER_VERSION_STRING} in ${PYTFCOMM_NCCL_H_DIR}, "
               "kernels for sm ${PYTFCOMM_CUDA_ARCHS}")

# --- kernels: nvcc -> fatbin -> bin2c header --------------------------------
set(_gencode)
foreach(_a ${PYTFCOMM_CUDA_ARCHS})
  list(APPEND _gencode -gencode arch=compute_${_a},code=sm_${_a})
endforeach()
list(GET PYTFCOMM_CUDA_ARCHS 0 _first)
list(APPEND _gencode -gencode arch=compute_${_first},code=compute_${_first})
set(_gen ${CMAKE_CURRENT_BINARY_DIR}/generated)
find_program(PYTFCOMM_BIN2C bin2c HINTS ${CUDAToolkit_BIN_DIR} REQUIRED)
add_custom_command(
  OUTPUT ${_gen}/kernels.fatbin
  COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} --fatbin -O3 -std=c++17 ${_gencode}
          -o ${_gen}/kernels.fatbin ${PYTFCOMM_GPU_KERNELS}
  DEPENDS ${PYTFCOMM_GPU_KERNELS}
  COMMENT "nvcc: csrc/gpu/kernels.cu -> fatbin (sm ${PYTFCOMM_CUDA_ARCHS})"
  VERBATIM)
# 8-byte elements: cuModuleLoadData wants the image aligned.
add_custom_command(
  OUTPUT ${_gen}/kernels_fatbin.h
  COMMAND ${PYTFCOMM_BIN2C} --const --static --type longlong --name ptc_kernels_fatbin
          ${_gen}/kernels.fatbin > ${_gen}/kernels_fatbin.h
  DEPENDS ${_gen}/kernels.fatbin
  VERBATIM)
set_source_files_properties(${_gen}/kernels_fatbin.h PROPERTIES GENERATED TRUE)

target_sources(pytfcomm_core PRIVATE ${PYTFCOMM_GPU_SOURCES}
  ${_gen}/kernels_fatbin.h
)
# Headers only: cuda.h and nccl.h declare types and prototypes; no library.
target_include_directories(pytfcomm_core SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS}
                           ${PYTFCOMM_NCCL_H_DIR})
target_link_libraries(pytfcomm_core PUBLIC ${CMAKE_DL_LIBS})
