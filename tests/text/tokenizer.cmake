# Tokenizer tests. Fast unit tests (no Python) run under the sanitizers too; the golden comparison
# regenerates its references live with Python `tokenizers` (ctest fixture) and compares bit for bit.
tf_add_test(test_tokenizer_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_unit.cpp
            LIBS tf_text LABELS "cpu;sanitize")

set(TF_TOKENIZER_GOLDENS ${PROJECT_BINARY_DIR}/tokenizer-goldens)
add_test(NAME tokenizer_goldens_generate
         COMMAND ${TF_PYTHON} ${PROJECT_SOURCE_DIR}/tools/tokenizer_goldens.py ${PROJECT_SOURCE_DIR}/../shared
                 ${TF_TOKENIZER_GOLDENS})
set_tests_properties(tokenizer_goldens_generate PROPERTIES FIXTURES_SETUP tokenizer_goldens LABELS "cpu"
                     TIMEOUT 300)

add_executable(test_tokenizer_golden ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_golden.cpp)
target_link_libraries(test_tokenizer_golden PRIVATE tf_text GTest::gtest GTest::gtest_main)
tf_test_code(test_tokenizer_golden)
target_compile_definitions(test_tokenizer_golden PRIVATE TF_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
                                                         TF_GOLDEN_DIR="${TF_TOKENIZER_GOLDENS}")
gtest_discover_tests(test_tokenizer_golden PROPERTIES LABELS "cpu" FIXTURES_REQUIRED tokenizer_goldens
                     DISCOVERY_TIMEOUT 60)

add_executable(tokenizer_bench ${PROJECT_SOURCE_DIR}/bench/tokenizer_bench.cpp)
target_link_libraries(tokenizer_bench PRIVATE tf_text)

# Reference encodings stored in text-fixtures (made upstream by HF tokenizers/transformers).
tf_add_test(test_tokenizer_vectors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_vectors.cpp
            LIBS tf_text LABELS "cpu")

# Tokenizer::token_bytes (structured outputs) on the fixtures' real tokenizers.
tf_add_test(test_token_bytes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_token_bytes.cpp LIBS tf_text LABELS "cpu")
