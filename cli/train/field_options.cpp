// Command-line options derived from the library's option tables, and its messages in their words.
#include "cli/train/field_options.h"

#include "base/field_spelling.h"

namespace tower::cli {

std::string flag_of(const std::string& id)
{
	std::string flag = "--" + id;
	for (char& ch : flag)
		if (ch == '_')
			ch = '-';
	return flag;
}

std::string in_flags(const std::string& message)
{
	return spelled(message);
}

namespace {

const char* type_name(FieldKind kind)
{
	switch (kind) {
	case FieldKind::integer: return "INT";
	case FieldKind::number: return "FLOAT";
	case FieldKind::boolean: return "BOOLEAN";
	case FieldKind::text: break;
	}
	return "TEXT";
}

} // namespace

void add_field_option(CLI::App& app, const std::string& id, const std::string& help, FieldKind kind, FieldRange range,
		      bool is_switch, const std::string& default_text, GivenFields& given)
{
	if (is_switch) {
		app.add_flag_callback(flag_of(id), [&given, id] { given[id] = "true"; }, help);
		return;
	}
	CLI::Option* o = app.add_option_function<std::string>(
		flag_of(id), [&given, id](const std::string& v) { given[id] = v; }, help);
	o->type_name(type_name(kind));
	o->default_str(default_text);
	if (range == FieldRange::positive)
		o->check(CLI::PositiveNumber);
	else if (range == FieldRange::non_negative)
		o->check(CLI::NonNegativeNumber);
}

std::set<std::string> given_ids(const GivenFields& given)
{
	std::set<std::string> ids;
	for (const auto& [id, text] : given)
		ids.insert(id);
	return ids;
}

} // namespace tower::cli
