// Command-line options derived from the library's option tables: `fusion_mb` is --fusion-mb, with
// the row's help, type, range and default; and the library's messages in the command line's words.
#pragma once

#include <map>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/options/field.h"

namespace tower::cli {

// "fusion_mb" -> "--fusion-mb".
std::string flag_of(const std::string& id);

// The library names a field by its id in backquotes (`fusion_mb`); the command line says
// --fusion-mb (base/field_spelling.h, installed by main()).
std::string in_flags(const std::string& message);

// The text each field was given on the command line, by id.
using GivenFields = std::map<std::string, std::string>;

void add_field_option(CLI::App& app, const std::string& id, const std::string& help, FieldKind kind, FieldRange range,
		      bool is_switch, const std::string& default_text, GivenFields& given);

// An option for every row a front end sets, showing the default of `defaults` (or the row's
// front-end default); parsing records the given text in `given`.
template <typename Config>
void add_field_options(CLI::App& app, const std::vector<Field<Config>>& table, const Config& defaults, GivenFields& given)
{
	for (const Field<Config>& f : table)
		if (f.front_end)
			add_field_option(app, f.id, f.help, f.kind, f.range, f.is_switch,
					 f.front_end_default.empty() ? f.get(defaults) : f.front_end_default, given);
}

// Sets every row given (or with a front-end default) in table order; `skip` names ids the
// caller sets itself. Throws the rows' tower::AgreedError.
template <typename Config>
void apply_fields(const std::vector<Field<Config>>& table, const GivenFields& given, Config& c,
		  const std::set<std::string>& skip = {})
{
	for (const Field<Config>& f : table) {
		if (skip.count(f.id))
			continue;
		if (const auto g = given.find(f.id); g != given.end())
			f.set(c, g->second);
		else if (!f.front_end_default.empty())
			f.set(c, f.front_end_default);
	}
}

// The ids given.
std::set<std::string> given_ids(const GivenFields& given);

} // namespace tower::cli
