// Text to values for option-table rows, with errors that name the field and what to give instead.
#include "runtime/options/field_codecs.h"

#include <cerrno>
#include <cmath>
#include <cctype>
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

// Integers read as the command line always read them: decimal, 0x hex or 0 octal (base 0).
int64_t parse_integer_field(const std::string& id, const std::string& text, FieldRange range)
{
	char* end = nullptr;
	errno = 0;
	const long long v = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 0);
	if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
		refuse(id, "'" + text + "'", "not an integer", true, range);
	if (!in_range(static_cast<double>(v), range))
		refuse(id, text, "out of range", true, range);
	return v;
}

// As strtoull reads it (a seed of -1 is 2^64 - 1, as the command line always took it).
uint64_t parse_unsigned_field(const std::string& id, const std::string& text)
{
	char* end = nullptr;
	errno = 0;
	const unsigned long long v = text.empty() ? 0 : std::strtoull(text.c_str(), &end, 0);
	if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
		refuse(id, "'" + text + "'", "not a whole number", true, FieldRange::non_negative);
	return v;
}

void refuse_out_of_type(const std::string& id, const std::string& text, bool integer, FieldRange range)
{
	refuse(id, text, "out of range", integer, range);
}

double parse_number_field(const std::string& id, const std::string& text, FieldRange range)
{
	char* end = nullptr;
	const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
	if (text.empty() || end != text.c_str() + text.size())
		refuse(id, "'" + text + "'", "not a number", false, range);
	if (!in_range(v, range) || std::isinf(v))
		refuse(id, text, "out of range", false, range);
	return v;
}

// The command line's forms, in any case: true, on, yes, enable, t, y, + or a number other than 0;
// false, off, no, disable, f, n, - or 0.
bool parse_bool_field(const std::string& id, const std::string& text)
{
	std::string t = text;
	for (char& ch : t)
		ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
	if (t == "true" || t == "on" || t == "yes" || t == "enable" || t == "t" || t == "y" || t == "+")
		return true;
	if (t == "false" || t == "off" || t == "no" || t == "disable" || t == "f" || t == "n" || t == "-")
		return false;
	char* end = nullptr;
	const long long n = t.empty() ? 0 : std::strtoll(t.c_str(), &end, 10);
	if (t.empty() || end != t.c_str() + t.size())
		throw AgreedError(fmt::format("`{}` '{}': give true or false", id, text));
	return n != 0;
}

const std::string& parse_choice_field(const std::string& id, const std::string& text, const std::vector<std::string>& names)
{
	for (const std::string& n : names)
		if (n == text)
			return n;
	throw AgreedError(fmt::format("`{}` '{}': give one of {}", id, text, fmt::join(names, ", ")));
}

} // namespace tower
