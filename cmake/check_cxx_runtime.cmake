# Run after libpytfcomm_core.so is linked (cmake -DLIB=... -DOBJDUMP=... -DCXX=... -P):
# fails the build when the C++ runtime went into LIB statically instead of as a
# dependency on the shared one. Such a second copy shares std::locale's globals
# with the libstdc++.so.6 that Python's other extensions load, and the process
# crashes at the first number formatted into a stream (seen on Ubuntu 24.04 with
# a GCC under /opt/gcc that has only a static libstdc++). A compiler can do this
# without any flag saying so, hence a check of the result rather than the flags.
execute_process(COMMAND "${OBJDUMP}" -p "${LIB}" OUTPUT_VARIABLE _out RESULT_VARIABLE _rc
                ERROR_QUIET)
if(NOT _rc EQUAL 0)
  return()  # no verdict without objdump's view of the library
endif()
if(NOT _out MATCHES "NEEDED +lib(std)?c\\+\\+\\.so")
  message(FATAL_ERROR
    "pytfcomm: ${CXX} linked the C++ runtime statically into ${LIB} (it needs no "
    "libstdc++.so). A second, static C++ runtime beside the shared one Python's other "
    "extensions load crashes the process. Build with a compiler that links libstdc++ "
    "as a shared library, e.g. CXX=/usr/bin/g++ CC=/usr/bin/gcc pip install ..., or "
    "drop -static-libstdc++ from its flags or specs.")
endif()
