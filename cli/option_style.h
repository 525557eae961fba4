// How tower's command line reads: help that shows each option's default, errors in tower's words.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tower::cli {

// Applies to `app` and every subcommand under it, so options added anywhere get it without
// anything on their own line. Call once, after every option is added and before parsing:
// - help shows each option's default, captured from the variable the option is bound to
//   ("[default: none]" for an empty one); a description that already names its default keeps it;
// - CLI11's range checks (CLI::PositiveNumber, CLI::NonNegativeNumber, CLI::Range) say what was
//   wrong and what to give instead, e.g. "--batch: 0 is out of range; give 1 or more";
// - a parse error prints "error: ..." and where to read the options.
void apply_option_style(CLI::App& app);

// The message of a range check on `text` for an option of CLI11 type `type_name` ("INT",
// "UINT", "FLOAT", ...) whose values run from `low` to `high` (inclusive, or exclusive of `low`
// where `above_low`); empty when `text` is in range. Exposed for tests.
std::string range_problem(const std::string& text, const std::string& type_name, double low, double high,
			  bool above_low);

} // namespace tower::cli
