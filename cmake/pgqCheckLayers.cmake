# The layering rule, checked at build time: a folder's sources may include headers of
# that folder and of the folders below it only (README, "Where the code lives").
#   cmake -DFOLDER=<dir> -DALLOWED="support;ir" -DSTAMP=<file> -P pgqCheckLayers.cmake
# FOLDER and its subfolders (frontend/onnx/ is part of frontend/) are scanned for *.h,
# *.cc and *.def; every `#include "a/b.h"` whose first path part is a project folder
# must name a folder in ALLOWED (or FOLDER itself). Includes of
# generated headers ("pgq_version.h") and of other projects (<...>) have no folder part
# of ours and pass. Fails with one line per violation: file, line, include, rule.
# A sublayer inside a folder is checked the same way: FOLDER=frontend/onnx with
# PREFIX=frontend/onnx may include its own files, the folders in ALLOWED and, of its
# parent folder, only the headers listed in ALLOWED_FILES (those below it).
set(project_folders support kernels ir frontend plan passes runtime app cli)
get_filename_component(folder_name "${FOLDER}" NAME)
if(PREFIX)
  set(rule "${PREFIX}/ may include only ${PREFIX}/, [${ALLOWED}] (folders below it) and [${ALLOWED_FILES}] (the headers of its folder below it)")
else()
  set(rule "${folder_name}/ may include only ${folder_name}/ and [${ALLOWED}] (folders below it)")
endif()
file(GLOB_RECURSE files "${FOLDER}/*.h" "${FOLDER}/*.cc" "${FOLDER}/*.def")
set(violations "")
foreach(file ${files})
  file(STRINGS "${file}" lines)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"(([A-Za-z_]+)/[^\"]*)\"")
      set(path "${CMAKE_MATCH_1}")
      set(target "${CMAKE_MATCH_2}")
      list(FIND project_folders "${target}" known)
      list(FIND ALLOWED "${target}" allowed)
      set(own FALSE)
      if(PREFIX)
        string(FIND "${path}" "${PREFIX}/" at)
        list(FIND ALLOWED_FILES "${path}" listed)
        if(at EQUAL 0 OR listed GREATER -1)
          set(own TRUE)
        endif()
      elseif(target STREQUAL folder_name)
        set(own TRUE)
      endif()
      if(known GREATER -1 AND allowed EQUAL -1 AND NOT own)
        string(STRIP "${line}" stripped)
        list(APPEND violations "${file}:${line_number}: ${stripped}: ${rule}")
      endif()
    endif()
  endforeach()
endforeach()
if(violations)
  foreach(violation IN LISTS violations)
    message(NOTICE "${violation}")  # NOTICE: one unwrapped line each
  endforeach()
  list(LENGTH violations count)
  message(FATAL_ERROR "layering rule broken by ${count} include(s), listed above")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
