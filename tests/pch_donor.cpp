// The donor of the test targets' precompiled headers (tests/CMakeLists.txt, tf_test_pch): it compiles them
// once a build, and every tf_add_test target reuses them.
int main() {
  return 0;
}
