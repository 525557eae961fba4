// Text to values for option-table rows, with errors that name the field and what to give instead.
#include "runtime/options/field_codecs.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/ranges.h>

#include "base/error.h"

namespace tower {

namespace {

std::string expected(bool integer, FieldRange range)
{
	switch (range) {
	case FieldRange::positive: return integer ? "1 or more" : "a number above 0";
	case FieldRange::non_negative: return integer ? "0 or more" : "a number of 0 or more";
	case FieldRange::any: break;
	}
	return integer ? "an integer" : "a number";
}

bool in_range(double v, FieldRange range)
{
	switch (range) {
	case FieldRange::positive: return v > 0;
	case FieldRange::non_negative: return v >= 0;
	case FieldRange::any: break;
	}
	return !std::isnan(v);
}

[[noreturn]] void refuse(const std::string& id, const std::string& text, const std::string& what, bool integer,
			 FieldRange range)
{
	throw AgreedError(fmt::format("`{}` {}: {}; give {}", id, text, what, expected(integer, range)));
}

} // namespace

int64_t parse_integer_field(const std::string& id, const std::string& text, FieldRange range)
{
	char* end = nullptr;
	errno = 0;
	const long long v = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
	if (text.empty() || *end != '\0' || errno == ERANGE)
		refuse(id, "'" + text + "'", "not an integer", true, range);
	if (!in_range(static_cast<double>(v), range))
		refuse(id, text, "out of range", true, range);
	return v;
}

uint64_t parse_unsigned_field(const std::string& id, const std::string& text)
{
	char* end = nullptr;
	errno = 0;
	const unsigned long long v = text.empty() || text[0] == '-' ? 0 : std::strtoull(text.c_str(), &end, 10);
	if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE)
		refuse(id, "'" + text + "'", "not a whole number", true, FieldRange::non_negative);
	return v;
}

double parse_number_field(const std::string& id, const std::string& text, FieldRange range)
{
	char* end = nullptr;
	const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
	if (text.empty() || *end != '\0')
		refuse(id, "'" + text + "'", "not a number", false, range);
	if (!in_range(v, range) || std::isinf(v))
		refuse(id, text, "out of range", false, range);
	return v;
}

bool parse_bool_field(const std::string& id, const std::string& text)
{
	if (text == "true" || text == "1" || text == "on" || text == "yes")
		return true;
	if (text == "false" || text == "0" || text == "off" || text == "no")
		return false;
	throw AgreedError(fmt::format("`{}` '{}': give true or false", id, text));
}

const std::string& parse_choice_field(const std::string& id, const std::string& text, const std::vector<std::string>& names)
{
	for (const std::string& n : names)
		if (n == text)
			return n;
	throw AgreedError(fmt::format("`{}` '{}': give one of {}", id, text, fmt::join(names, ", ")));
}

} // namespace tower
