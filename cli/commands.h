#pragma once
// Each subcommand group registers itself on the root CLI11 app. A command's callback
// throws pgq::Error for anything the user got wrong; main() turns that into a
// message on stderr and exit code 2.
#include <CLI/CLI.hpp>

namespace pgq::cli {

void addIrCommands(CLI::App& app);
void addTrainCommand(CLI::App& app);
void addSqnrTableCommand(CLI::App& app);
void addRecipeCommand(CLI::App& app);
void addHwprobeCommand(CLI::App& app);
void addGpuprobeCommand(CLI::App& app);
void addExperimentCommand(CLI::App& app);
void addImportCommand(CLI::App& app);
void addRooflineCommand(CLI::App& app);

}  // namespace pgq::cli
