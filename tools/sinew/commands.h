// Each `sinew <command>` lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace sinew::cli {

// Each adds its subcommand to `app`; the subcommand's callback sets `rc`.
void add_run_command(CLI::App& app, int& rc);    // run.cc: the torchrun-style launcher
void add_bench_command(CLI::App& app, int& rc);  // bench.cc: benchmark front end
void add_env_command(CLI::App& app, int& rc);    // main.cc: lists SINEW_* tunables
void add_fr_command(CLI::App& app, int& rc);     // fr_command.cc: flight-recorder dump analyzer
void add_tune_command(CLI::App& app, int& rc);   // tune.cc: pre-fills the GEMM autotuning cache

}  // namespace sinew::cli
