# Fails when the hypura binary or an engine library holds test support (src/*/testing/:
# the fault-injecting read queue, synthetic model shapes, the plain resident provider,
# golden fixtures). Usage: cmake -DNM=<nm> -DFILES=<hypura;libhypura_io.a;...> -P check_shipped.cmake
foreach(file ${FILES})
  execute_process(COMMAND ${NM} -C ${file}
                  COMMAND grep -E "FaultInjectingQueue|ReadGate|ShapeSpec|synthetic_model|ResidentProvider|golden::"
                  OUTPUT_VARIABLE found RESULT_VARIABLE rc ERROR_QUIET)
  if(found)
    string(REGEX REPLACE "\n.*" "" first "${found}")
    message(FATAL_ERROR "${file} holds test support: ${first}")
  endif()
endforeach()
message(STATUS "the binary and the engine libraries hold no test support")
