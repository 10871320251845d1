// The target that compiles the tests' precompiled headers (tests/CMakeLists.txt, tf_test_pch).
