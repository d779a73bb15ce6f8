# Writes a C++ header that holds a text file as `inline constexpr char NAME[]` (a raw string
# literal), so the server ships its chat page inside the binary. Run at build time:
#   cmake -DINPUT=page.html -DOUTPUT=page.h -DNAME=kPage -P embed_text.cmake
set(delimiter "hypura_embed")  # a raw string's delimiter is at most 16 characters
file(READ "${INPUT}" text)
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains )${delimiter}\", which would end the raw string")
endif()
get_filename_component(source_name "${INPUT}" NAME)
# The value of ${text} is inserted as is: CMake does not expand the ${...} or escapes in it.
set(header "// Generated from ${source_name} by embed_text.cmake at build time: do not edit.
#pragma once

namespace hypura::server {

inline constexpr char ${NAME}[] = R\"${delimiter}(${text})${delimiter}\";

}  // namespace hypura::server
")
file(WRITE "${OUTPUT}" "${header}")
