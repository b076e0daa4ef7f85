# One way to add a library layer, a test or a tool, used everywhere.

function(sinew_apply_sanitizers)
  if(SINEW_SANITIZE)
    list(JOIN SINEW_SANITIZE "," _san)
    add_compile_options(-fsanitize=${_san} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=${_san})
  endif()
endfunction()

# sinew_add_layer(<layer> SOURCES ... DEPS ... [PRIVATE_DEPS ...])
# Creates target sinew_<layer>, alias sinew::<layer>, exported as sinew::<layer>.
function(sinew_add_layer layer)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(sinew_${layer} ${A_SOURCES})
  add_library(sinew::${layer} ALIAS sinew_${layer})
  set_target_properties(sinew_${layer} PROPERTIES EXPORT_NAME ${layer} OUTPUT_NAME sinew_${layer})
  target_include_directories(sinew_${layer}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(sinew_${layer} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  target_compile_options(sinew_${layer} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # Calls between a shared library's own functions go direct, not through
  # the PLT: nobody interposes sinew's symbols, and the op path calls across
  # files (the Flight Recorder's hooks on every collective).
  target_compile_options(sinew_${layer} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-fno-semantic-interposition>)
  install(TARGETS sinew_${layer} EXPORT sinewTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# sinew_add_test(<name> SOURCES ... DEPS ... LABELS ... [TIMEOUT s])
function(sinew_add_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  # Flight Recorder dumps from failure tests land in the build tree, not /tmp.
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/fr-dumps)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
    ENVIRONMENT "SINEW_FR_DUMP_TEMP_FILE=${PROJECT_BINARY_DIR}/fr-dumps/${name}_rank_")
endfunction()
