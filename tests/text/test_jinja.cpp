// Unit tests of the Jinja renderer, independent of Python: each expectation is what jinja2 renders with
// transformers' settings (trim_blocks, lstrip_blocks, loopcontrols, ImmutableSandboxedEnvironment).
#include <gtest/gtest.h>

#include "text/jinja/template.h"

namespace tf::jinja {
namespace {

std::string render(const std::string& src, const Vars& vars = {}) { return Template(src).render(vars); }

TEST(Jinja, Text) { EXPECT_EQ(render("hello"), "hello"); }

}  // namespace
}  // namespace tf::jinja
