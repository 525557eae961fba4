// How tower's command line reads: help that shows each option's default, errors in tower's words.
#include "cli/option_style.h"

#include <cfloat>
#include <cmath>
#include <memory>

#include <fmt/format.h>

namespace tower::cli {

namespace {

// get_type_name() is "INT", or "INT:POSITIVE" with the validators' descriptions after it.
bool is_integer_type(const std::string& type_name)
{
	const std::string type = type_name.substr(0, type_name.find(':'));
	return type == "INT" || type == "UINT";
}

// What a valid value looks like, for the second half of a message.
std::string expected_values(bool integer, double low, double high, bool above_low)
{
	const bool unbounded = high >= DBL_MAX;
	if (low == 0 && above_low && unbounded)
		return integer ? "1 or more" : "a number above 0";
	if (unbounded)
		return fmt::format("{}{} or more", integer ? "" : "a number of ", low);
	return fmt::format("{} from {}{} to {}", integer ? "an integer" : "a number", low, above_low ? " (excluded)" : "",
			   high);
}

// CLI11's own converter, so a value passes the check exactly when the option accepts it.
bool parse_number(const std::string& text, bool integer, double* value)
{
	if (!integer)
		return CLI::detail::lexical_cast(text, *value);
	long long i = 0;
	unsigned long long u = 0;
	if (CLI::detail::lexical_cast(text, i))
		*value = static_cast<double>(i);
	else if (CLI::detail::lexical_cast(text, u))
		*value = static_cast<double>(u);
	else
		return false;
	return true;
}

// Replaces a range validator's check with range_problem, keeping its name for the help line.
void restate_range(const CLI::Option& option, CLI::Validator& validator, double low, double high, bool above_low)
{
	const std::string type_name = option.get_type_name();
	validator.operation([type_name, low, high, above_low](std::string& text) {
		return range_problem(text, type_name, low, high, above_low);
	});
}

// CLI11's range validators are known by their descriptions: "POSITIVE" and "NONNEGATIVE" for
// CLI::PositiveNumber and CLI::NonNegativeNumber, "TYPE in [LOW - HIGH]" for CLI::Range(LOW, HIGH).
void restate_range_check(const CLI::Option& option, CLI::Validator& validator)
{
	const std::string description = validator.get_description();
	if (description == "POSITIVE")
		return restate_range(option, validator, 0, DBL_MAX, true);
	if (description == "NONNEGATIVE")
		return restate_range(option, validator, 0, DBL_MAX, false);
	const size_t open = description.find(" in ["), dash = description.find(" - ", open);
	if (open == std::string::npos || dash == std::string::npos || !description.ends_with("]"))
		return;
	const std::string low_text = description.substr(open + 5, dash - open - 5);
	const std::string high_text = description.substr(dash + 3, description.size() - dash - 4);
	double low = 0, high = 0;
	if (CLI::detail::lexical_cast(low_text, low) && CLI::detail::lexical_cast(high_text, high))
		restate_range(option, validator, low, high, false);
}

void restate_checks(CLI::Option& option)
{
	for (int i = 0;; ++i) {
		CLI::Validator* v = nullptr;
		try {
			v = option.get_validator(i);
		} catch (const CLI::OptionNotFound&) {
			return;
		}
		restate_range_check(option, *v);
	}
}

bool names_its_default(const std::string& description)
{
	return description.find("default") != std::string::npos;
}

// Help lines "--batch INT:POSITIVE   Samples per rank per step [default: 128]".
class DefaultsFormatter : public CLI::Formatter {
public:
	std::string make_option_opts(const CLI::Option* option) const override
	{
		// The default moves from "TYPE=VALUE" into the description.
		std::string opts = CLI::Formatter::make_option_opts(option);
		const std::string shown = "=" + option->get_default_str();
		if (!option->get_default_str().empty())
			if (const auto at = opts.find(shown); at != std::string::npos)
				opts.erase(at, shown.size());
		return opts;
	}

	std::string make_option_desc(const CLI::Option* option) const override
	{
		// Flags (no value) are off unless given.
		const std::string description = option->get_description();
		if (option->get_expected_max() == 0 || names_its_default(description))
			return description;
		std::string value = option->get_default_str();
		if (option->get_type_name().starts_with("BOOLEAN") && (value == "0" || value == "1"))
			value = value == "1" ? "true" : "false";
		return fmt::format("{} [default: {}]", description, value.empty() ? "none" : value);
	}
};

void style(CLI::App& app, const std::shared_ptr<CLI::Formatter>& formatter)
{
	app.formatter(formatter);
	for (CLI::Option* option : app.get_options()) {
		option->capture_default_str();
		restate_checks(*option);
	}
	for (CLI::App* sub : app.get_subcommands({}))
		style(*sub, formatter);
}

std::string failure_message(const CLI::App* app, const CLI::Error& e)
{
	std::string command = app->get_name();
	for (const CLI::App* sub : app->get_subcommands())
		command += " " + sub->get_name();
	return fmt::format("error: {}\nSee '{} --help' for the options and their defaults.\n", e.what(), command);
}

} // namespace

std::string range_problem(const std::string& text, const std::string& type_name, double low, double high,
			  bool above_low)
{
	const bool integer = is_integer_type(type_name);
	double value = 0;
	if (!parse_number(text, integer, &value))
		return fmt::format("'{}' is not {}; give {}", text, integer ? "an integer" : "a number",
				   expected_values(integer, low, high, above_low));
	const bool in_range = (above_low ? value > low : value >= low) && value <= high; // false for NaN
	if (in_range)
		return {};
	return fmt::format("{} is out of range; give {}", text, expected_values(integer, low, high, above_low));
}

void apply_option_style(CLI::App& app)
{
	style(app, std::make_shared<DefaultsFormatter>());
	app.failure_message(failure_message);
}

} // namespace tower::cli
