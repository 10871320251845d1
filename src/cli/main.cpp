// tensorfold: serve | pull | models | info | generate | bench. Errors print as one line, exit code 1;
// usage errors exit 2 (CLI11's convention); success 0.
#include <iostream>

#include "cli/commands.h"
#include "cli/serve.h"
#include "core/error.h"

#ifndef TF_VERSION
#define TF_VERSION "0.1.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{"TensorFold: a local inference server with exact speculative decoding", "tensorfold"};
  app.set_version_flag("--version", std::string("tensorfold ") + TF_VERSION);
  app.require_subcommand(1);
  tf::cli::add_serve_command(app);
  tf::cli::add_generate_command(app);
  tf::cli::add_models_command(app);
  tf::cli::add_info_command(app);
  tf::cli::add_pull_command(app);
  tf::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "tensorfold: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
