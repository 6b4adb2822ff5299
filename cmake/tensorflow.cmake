# TensorFlow integration: the TF-free engine parts the op library needs, and
# the op library `pytfcomm/_tf_ops.so` itself when TensorFlow is importable.
#
# The op library links libpytfcomm_core.so (one registry of communicators
# per process) and TF's libtensorflow_framework.so.2, with the flags
# tf.sysconfig reports (framework headers only). It is tied to the TF it was
# built against: _tf_build_info.py records that version and pytfcomm.tf
# checks it at import. When TF is not importable at build time (a plain
# `pip install .` builds in an isolated environment without TF), the wheel
# still ships the op sources and headers under pytfcomm/_tf_src, and
# pytfcomm.tf compiles them on first use against the TF that is installed
# (see pytfcomm/tf/_build.py and docs/tensorflow.md).
#
# GPU kernels (csrc/tf/gpu_kernels.cc, docs/gpu.md) join the library when
# PYTFCOMM_TF_GPU is ON, or AUTO (the default) and TensorFlow is a CUDA build
# (tf.sysconfig.get_build_info()["is_cuda_build"]) and PYTFCOMM_WITH_CUDA=ON
# (they run on the core's NCCL path). They need no CUDA header and no CUDA
# library: TF's framework headers plus xla/stream_executor/stream.h, which
# every TF wheel ships, so ON also compiles them against a CPU TF as a check.
set(PYTFCOMM_TF_GPU "AUTO" CACHE STRING "GPU kernels in the TF op library: AUTO, ON or OFF")
set_property(CACHE PYTFCOMM_TF_GPU PROPERTY STRINGS AUTO ON OFF)

# The local combine, worker pool and executor the ops use are core sources
# (CMakeLists.txt: no TF headers), so a JIT-built op library finds them in
# the installed libpytfcomm_core.so.

# The source lists: csrc/tf/CMakeLists.txt.

# Sources and headers for the on-first-use build (a few hundred KiB).
install(FILES ${PYTFCOMM_TF_SOURCES} DESTINATION pytfcomm/_tf_src/tf)
install(FILES ${PYTFCOMM_TF_GPU_SOURCES} DESTINATION pytfcomm/_tf_src/tf_gpu)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/csrc/ DESTINATION pytfcomm/_tf_src
        FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_CURRENT_LIST_DIR}/tf_config.h.in DESTINATION pytfcomm/_tf_src)

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env TF_CPP_MIN_LOG_LEVEL=3
          ${Python_EXECUTABLE} -c
          "import tensorflow as tf; s = tf.sysconfig; print(tf.__version__); print(tf.__git_version__); print(','.join(s.get_compile_flags())); print(','.join(s.get_link_flags())); print(int(bool(s.get_build_info().get('is_cuda_build'))))"
  RESULT_VARIABLE _tf_rc
  OUTPUT_VARIABLE _tf_out
  ERROR_QUIET
  OUTPUT_STRIP_TRAILING_WHITESPACE)

if(NOT _tf_rc EQUAL 0)
  message(STATUS "pytfcomm: TensorFlow is not importable by ${Python_EXECUTABLE}; "
                 "the TF op library will be compiled on first use instead")
  set(PYTFCOMM_TF_VERSION "")
  set(PYTFCOMM_TF_GIT_VERSION "")
  set(PYTFCOMM_TF_GPU_KERNELS False)
else()
  string(REPLACE "\n" ";" _tf_lines "${_tf_out}")
  list(GET _tf_lines 0 PYTFCOMM_TF_VERSION)
  list(GET _tf_lines 1 PYTFCOMM_TF_GIT_VERSION)
  list(GET _tf_lines 2 _tf_cflags)
  list(GET _tf_lines 3 _tf_lflags)
  list(GET _tf_lines 4 _tf_is_cuda)
  string(REPLACE "," ";" _tf_cflags "${_tf_cflags}")
  string(REPLACE "," ";" _tf_lflags "${_tf_lflags}")
  message(STATUS "pytfcomm: building the TF op library against TensorFlow ${PYTFCOMM_TF_VERSION}")

  add_library(_tf_ops MODULE ${PYTFCOMM_TF_SOURCES})
  set_target_properties(_tf_ops PROPERTIES PREFIX "" INSTALL_RPATH "$ORIGIN")
  target_compile_options(_tf_ops PRIVATE ${_tf_cflags} -Wno-deprecated-declarations
                                         -Wno-interference-size -Wundef)
  target_link_libraries(_tf_ops PRIVATE pytfcomm_core ${_tf_lflags})
  install(TARGETS _tf_ops LIBRARY DESTINATION pytfcomm)

  string(TOUPPER "${PYTFCOMM_TF_GPU}" _want_gpu)
  set(PYTFCOMM_TF_GPU_KERNELS False)
  if(_want_gpu MATCHES "^(ON|1|TRUE|YES)$")
    if(NOT PYTFCOMM_WITH_CUDA)
      message(FATAL_ERROR "pytfcomm: PYTFCOMM_TF_GPU=ON needs PYTFCOMM_WITH_CUDA=ON (the GPU "
                          "kernels run on the core's NCCL path; see docs/gpu.md)")
    endif()
    set(PYTFCOMM_TF_GPU_KERNELS True)
    if(NOT _tf_is_cuda)
      message(STATUS "pytfcomm: TensorFlow ${PYTFCOMM_TF_VERSION} is not a CUDA build; its GPU "
                     "kernels are compiled anyway (PYTFCOMM_TF_GPU=ON), but only a CUDA "
                     "TensorFlow has GPU devices to run them on")
    endif()
  elseif(_want_gpu STREQUAL "AUTO" AND _tf_is_cuda)
    if(PYTFCOMM_WITH_CUDA)
      set(PYTFCOMM_TF_GPU_KERNELS True)
    else()
      message(STATUS "pytfcomm: TensorFlow is a CUDA build but PYTFCOMM_WITH_CUDA=OFF: the TF op "
                     "library gets no GPU kernels (rebuild with PYTFCOMM_WITH_CUDA=ON)")
    endif()
  endif()
  if(PYTFCOMM_TF_GPU_KERNELS)
    message(STATUS "pytfcomm: the TF op library gets GPU kernels")
    target_sources(_tf_ops PRIVATE ${PYTFCOMM_TF_GPU_SOURCES})
    # GOOGLE_CUDA as in TF's own GPU kernels; it changes no class layout in
    # the framework headers used here.
    target_compile_definitions(_tf_ops PRIVATE GOOGLE_CUDA=1)
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/tf_config.h.in
                 ${CMAKE_CURRENT_BINARY_DIR}/generated_tf/tf_config.h)
  target_include_directories(_tf_ops PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated_tf)
endif()

configure_file(${CMAKE_CURRENT_LIST_DIR}/tf_build_info.py.in
               ${CMAKE_CURRENT_BINARY_DIR}/_tf_build_info.py @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/_tf_build_info.py DESTINATION pytfcomm)
