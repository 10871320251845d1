// `tensorfold bench --shape`: the real-shape benchmark's options, and its refusal without a GPU. The binary
// runs with every CUDA device hidden, so CPU-only and CUDA builds (CI has no GPU either way) must both exit
// 2 saying the benchmark needs the CUDA backend, without starting it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "run_tensorfold.h"

namespace tf {
namespace {

// Parses `tensorfold bench ARGS` in-process (no callback runs when parsing fails).
void parse_bench(std::vector<const char*> args) {
  CLI::App app;
  cli::add_bench_command(app);
  args.insert(args.begin(), {"tensorfold", "bench"});
  app.parse(int(args.size()), args.data());
}

// The --format values `tensorfold bench ARGS` parses to; its run stops at the missing backend (exit 2).
std::vector<std::string> parsed_formats(std::vector<const char*> args) {
  setenv("CUDA_VISIBLE_DEVICES", "-1", 1);  // a CUDA build on a GPU machine must not start the benchmark
  CLI::App app;
  cli::add_bench_command(app);
  args.insert(args.begin(), {"tensorfold", "bench"});
  try {
    app.parse(int(args.size()), args.data());
    ADD_FAILURE() << "the benchmark ran without a CUDA device";
  } catch (const CLI::RuntimeError& e) {
    EXPECT_EQ(e.get_exit_code(), 2);
  }
  return app.get_subcommand("bench")->get_option("--format")->as<std::vector<std::string>>();
}

TEST(BenchShape, WithoutTheCudaBackendExitsTwoAndSaysWhy) {
  const ProcessResult r = run_tensorfold("bench --shape qwen3-8b");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("tensorfold bench: the shape benchmark"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ceilings:"), std::string::npos) << "the benchmark started: " << r.output;
}

// The MoE shape (tf_bench_moe's benchmark) takes the same way out without a GPU, in bf16 and MLX 4-bit.
TEST(BenchShape, TheMoeShapeTakesTheSamePath) {
  for (const char* args : {"bench --shape qwen3-30b-a3b", "bench --shape qwen3-30b-a3b --format mlx4 --quick",
                           "bench --shape qwen3-30b-a3b --format bf16,mlx4"}) {
    const ProcessResult r = run_tensorfold(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("needs the CUDA backend"), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("copy bandwidth"), std::string::npos) << "the benchmark started: " << r.output;
  }
}

// It has no MLX 8-bit or FP8 experts: asked for alone it refuses those formats as a usage error (before the
// backend is looked for); "all" gives it the formats it has.
TEST(BenchShape, TheMoeShapeRefusesFormatsItLacks) {
  for (const char* f : {"fp8", "mlx4,mlx8"}) {
    const ProcessResult r = run_tensorfold(std::string("bench --shape qwen3-30b-a3b --format ") + f);
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.code, 2) << "a usage error, not the missing backend: " << r.output;
    EXPECT_NE(r.output.find("runs bf16 and mlx4"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
  }
  const ProcessResult r = run_tensorfold("bench --shape all --format fp8 --quick");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
}

TEST(BenchShape, QuickAndAllTakeTheSamePath) {
  const ProcessResult r = run_tensorfold("bench --shape all --quick");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
}

TEST(BenchShape, UnknownShapeIsRejectedNamingTheKnownOnes) {
  try {
    parse_bench({"--shape", "qwen3-9b"});
    FAIL() << "--shape qwen3-9b was accepted";
  } catch (const CLI::ValidationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("qwen3-9b"), std::string::npos) << m;
    for (const char* known : {"qwen3-8b", "qwen3-0.6b", "qwen3-30b-a3b", "all"})
      EXPECT_NE(m.find(known), std::string::npos) << m;
  }
  const ProcessResult r = run_tensorfold("bench --shape qwen3-9b");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 2) << "a usage error, not the missing backend: " << r.output;
  EXPECT_NE(r.output.find("qwen3-9b"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
}

TEST(BenchShape, ShapeExcludesAModelAndQuickNeedsAShape) {
  EXPECT_THROW(parse_bench({"--shape", "qwen3-8b", "models/demo"}), CLI::ExcludesError);
  EXPECT_THROW(parse_bench({"--quick"}), CLI::RequiresError);
}

TEST(BenchShape, QuantizedFormatsTakeTheSamePath) {
  for (const char* args :
       {"bench --shape qwen3-8b --format mlx4", "bench --shape all --format bf16,mlx4,mlx8,fp8 --quick",
        "bench --shape qwen3-0.6b --format fp8 --format mlx8"}) {
    const ProcessResult r = run_tensorfold(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("needs the CUDA backend"), std::string::npos) << args << ": " << r.output;
  }
}

TEST(BenchShape, FormatListsAndRepeatsAccumulate) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parsed_formats({"--shape", "qwen3-8b", "--format", "bf16,mlx4"}), (V{"bf16", "mlx4"}));
  EXPECT_EQ(parsed_formats({"--shape", "qwen3-8b", "--format", "fp8", "--format", "mlx8"}),
            (V{"fp8", "mlx8"}));
  EXPECT_EQ(parsed_formats({"--format", "mlx4,mlx8,fp8", "--shape", "all", "--quick"}),
            (V{"mlx4", "mlx8", "fp8"}));
}

TEST(BenchShape, UnknownFormatIsRejectedNamingTheKnownOnes) {
  for (std::vector<const char*> args :
       {std::vector<const char*>{"--shape", "qwen3-8b", "--format", "mlx3"},
        std::vector<const char*>{"--shape", "qwen3-8b", "--format", "bf16,mlx3"}}) {
    try {
      parse_bench(args);
      FAIL() << "--format " << args[3] << " was accepted";
    } catch (const CLI::ValidationError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("mlx3"), std::string::npos) << m;
      for (const char* known : {"bf16", "mlx4", "mlx8", "fp8"})
        EXPECT_NE(m.find(known), std::string::npos) << m;
    }
  }
  const ProcessResult r = run_tensorfold("bench --shape qwen3-8b --format mlx4,int4");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 2) << "a usage error, not the missing backend: " << r.output;
  EXPECT_NE(r.output.find("int4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("needs the CUDA backend"), std::string::npos) << r.output;
}

TEST(BenchShape, FormatNeedsAShape) {
  EXPECT_THROW(parse_bench({"--format", "mlx4"}), CLI::RequiresError);
  EXPECT_THROW(parse_bench({"--format", "bf16", "models/demo"}), CLI::RequiresError);
  // One list an occurrence: the word after it is the checkpoint, which --shape excludes.
  EXPECT_THROW(parse_bench({"--shape", "qwen3-8b", "--format", "mlx4", "models/demo"}), CLI::ExcludesError);
}

TEST(BenchShape, HelpDocumentsTheShapes) {
  const ProcessResult r = run_tensorfold("bench --help");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--shape"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("qwen3-8b | qwen3-0.6b | qwen3-30b-a3b | all"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--quick"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--format"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16 | mlx4 | mlx8 | fp8"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tf
