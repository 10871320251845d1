# Jinja renderer and chat templates: unit tests (no Python) and the live comparison with transformers.
# Tests are registered with gtest_add_tests (a scan of the sources) rather than tf_add_test, so that the
# two-element label list "cpu;sanitize" reaches set_tests_properties intact.
function(tf_jinja_test name)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE tf_text GTest::gtest GTest::gtest_main)
  tf_test_code(${name})
  target_compile_definitions(${name} PRIVATE TF_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_add_tests(TARGET ${name} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${name}.cpp TEST_LIST tests)
  set_tests_properties(${tests} PROPERTIES LABELS "cpu;sanitize" ${ARGN})
endfunction()

tf_jinja_test(test_jinja)

# Goldens regenerated live from transformers for every template x conversation, then compared byte for byte.
add_test(NAME chat_template_goldens
         COMMAND ${TF_PYTHON} ${PROJECT_SOURCE_DIR}/tools/chat_template_goldens.py
                 --fixtures ${PROJECT_SOURCE_DIR}/../shared/text-fixtures
                 --out ${PROJECT_BINARY_DIR}/chat_template_goldens.json)
set_tests_properties(chat_template_goldens PROPERTIES FIXTURES_SETUP chat_template_goldens LABELS "cpu;sanitize"
                     TIMEOUT 120)
tf_jinja_test(test_jinja_goldens FIXTURES_REQUIRED chat_template_goldens)
