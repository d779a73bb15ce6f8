# Fails when a per-ISA kernel object defines any external symbol besides its fill
# function. A weak (inline/template) symbol compiled with -mavx512* could be picked by
# the linker for scalar code too, and the binary would then die with SIGILL on CPUs
# without that ISA. Usage: cmake -DNM=<nm> -DOBJECTS=<a.o;b.o> -P check_isa_symbols.cmake
foreach(obj ${OBJECTS})
  execute_process(COMMAND ${NM} -C --defined-only --extern-only ${obj}
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line ${lines})
    if(line MATCHES " [A-Za-z] " AND NOT line MATCHES "fill_(avx[0-9a-z]*|amx)_(kernels|attention)|__gxx_personality")
      message(FATAL_ERROR "${obj} exports ${line}: keep ISA code in an anonymous namespace")
    endif()
  endforeach()
endforeach()
message(STATUS "ISA kernel objects export only their fill functions")
