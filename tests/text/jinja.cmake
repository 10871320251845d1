# Jinja renderer and chat templates: unit tests (no Python) and the live comparison with transformers.
tf_add_test(test_jinja SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_jinja.cpp LIBS tf_text LABELS "cpu;sanitize")

# Goldens regenerated live from transformers for every template x conversation, then compared byte for byte.
add_test(NAME chat_template_goldens
         COMMAND ${TF_PYTHON} ${PROJECT_SOURCE_DIR}/tools/chat_template_goldens.py
                 --fixtures ${PROJECT_SOURCE_DIR}/../shared/text-fixtures
                 --out ${PROJECT_BINARY_DIR}/chat_template_goldens.json)
set_tests_properties(chat_template_goldens PROPERTIES FIXTURES_SETUP chat_template_goldens LABELS "cpu;sanitize"
                     TIMEOUT 120)
add_executable(test_jinja_goldens ${CMAKE_CURRENT_LIST_DIR}/test_jinja_goldens.cpp)
target_link_libraries(test_jinja_goldens PRIVATE tf_text GTest::gtest GTest::gtest_main)
target_compile_definitions(test_jinja_goldens PRIVATE TF_BINARY_DIR="${PROJECT_BINARY_DIR}")
gtest_discover_tests(test_jinja_goldens DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS "cpu;sanitize" FIXTURES_REQUIRED chat_template_goldens)
