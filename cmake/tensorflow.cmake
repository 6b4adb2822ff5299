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

# Local combine, worker pool and executor belong to the core (no TF headers),
# so a JIT-built op library finds them in the installed libpytfcomm_core.so.
target_sources(pytfcomm_core PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/engine/executor.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/engine/local_pool.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/engine/local_reduce.cc
)

set(PYTFCOMM_TF_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/ops.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/tf_common.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/output_buffer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/allreduce_kernel.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/gather_kernels.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/tf/c_api.cc
)

# Sources and headers for the on-first-use build (a few hundred KiB).
install(FILES ${PYTFCOMM_TF_SOURCES} DESTINATION pytfcomm/_tf_src/tf)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/csrc/ DESTINATION pytfcomm/_tf_src
        FILES_MATCHING PATTERN "*.h")

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env TF_CPP_MIN_LOG_LEVEL=3
          ${Python_EXECUTABLE} -c
          "import tensorflow as tf; s = tf.sysconfig; print(tf.__version__); print(tf.__git_version__); print(','.join(s.get_compile_flags())); print(','.join(s.get_link_flags()))"
  RESULT_VARIABLE _tf_rc
  OUTPUT_VARIABLE _tf_out
  ERROR_QUIET
  OUTPUT_STRIP_TRAILING_WHITESPACE)

if(NOT _tf_rc EQUAL 0)
  message(STATUS "pytfcomm: TensorFlow is not importable by ${Python_EXECUTABLE}; "
                 "the TF op library will be compiled on first use instead")
  set(PYTFCOMM_TF_VERSION "")
  set(PYTFCOMM_TF_GIT_VERSION "")
else()
  string(REPLACE "\n" ";" _tf_lines "${_tf_out}")
  list(GET _tf_lines 0 PYTFCOMM_TF_VERSION)
  list(GET _tf_lines 1 PYTFCOMM_TF_GIT_VERSION)
  list(GET _tf_lines 2 _tf_cflags)
  list(GET _tf_lines 3 _tf_lflags)
  string(REPLACE "," ";" _tf_cflags "${_tf_cflags}")
  string(REPLACE "," ";" _tf_lflags "${_tf_lflags}")
  message(STATUS "pytfcomm: building the TF op library against TensorFlow ${PYTFCOMM_TF_VERSION}")

  add_library(_tf_ops MODULE ${PYTFCOMM_TF_SOURCES})
  set_target_properties(_tf_ops PROPERTIES PREFIX "" INSTALL_RPATH "$ORIGIN")
  target_compile_options(_tf_ops PRIVATE ${_tf_cflags} -Wno-deprecated-declarations
                                         -Wno-interference-size)
  target_compile_definitions(_tf_ops PRIVATE PYTFCOMM_TF_VERSION="${PYTFCOMM_TF_VERSION}")
  target_link_libraries(_tf_ops PRIVATE pytfcomm_core ${_tf_lflags})
  install(TARGETS _tf_ops LIBRARY DESTINATION pytfcomm)
endif()

configure_file(${CMAKE_CURRENT_LIST_DIR}/tf_build_info.py.in
               ${CMAKE_CURRENT_BINARY_DIR}/_tf_build_info.py @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/_tf_build_info.py DESTINATION pytfcomm)
