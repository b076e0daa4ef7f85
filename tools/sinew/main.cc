// The `sinew` command-line tool.
#include <fmt/format.h>

#include <cstdio>

#include "sinew/core/env.h"
#include "sinew/core/error.h"
#include "tools/sinew/commands.h"

namespace sinew::cli {

void add_env_command(CLI::App& app, int& rc) {
  auto* cmd = app.add_subcommand("env", "List every environment variable sinew reads, its default and value");
  cmd->callback([&rc] {
    auto print = [](EnvSource source) {
      for (const auto& p : all_env_params(source)) {
        auto v = getenv_opt(p.name.c_str());
        fmt::print("{:<36} {:<7} default {:<10} {}{}\n", p.name, p.type,
                   p.default_value.empty() ? "(unset)" : p.default_value, p.help,
                   v ? fmt::format(" (set: {})", *v) : "");
      }
    };
    print(EnvSource::kTunable);
    fmt::print("\nThe launch protocol and the system's variables (set by torchrun, sinew run, mpirun, "
               "srun or the shell):\n");
    print(EnvSource::kLauncher);
    rc = 0;
  });
}

}  // namespace sinew::cli

int main(int argc, char** argv) {
  CLI::App app{"sinew: a C++ runtime for production distributed training"};
  app.require_subcommand(1);
  int rc = 0;
  sinew::cli::add_run_command(app, rc);
  sinew::cli::add_bench_command(app, rc);
  sinew::cli::add_env_command(app, rc);
  sinew::cli::add_fr_command(app, rc);
  sinew::cli::add_tune_command(app, rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const sinew::Error& e) {
    std::fprintf(stderr, "sinew: %s: %s\n", sinew::error_code_name(e.code()), e.what());
    return 2;
  }
  return rc;
}
