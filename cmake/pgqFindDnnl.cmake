# Finds Debian's oneDNN (libdnnl-dev 2.6) and defines the imported target DNNL::dnnl.
# Debian's own dnnl-config.cmake insists on OpenCL development files because its
# build enables the OpenCL GPU runtime; pgq only uses the CPU engine, so it locates
# the header and library directly instead of pulling in OpenCL headers.
if(NOT TARGET DNNL::dnnl)
  find_path(PGQ_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(PGQ_DNNL_LIBRARY NAMES dnnl)
  if(NOT PGQ_DNNL_INCLUDE_DIR OR NOT PGQ_DNNL_LIBRARY)
    message(FATAL_ERROR "oneDNN not found: install libdnnl-dev (scripts/setup.sh does)")
  endif()
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${PGQ_DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${PGQ_DNNL_INCLUDE_DIR}")
endif()
