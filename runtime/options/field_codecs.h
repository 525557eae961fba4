// Builders of option-table rows: a field of a number, a bool, one of several names or a form of
// its own, read and written as text, over the member a function reaches.
#pragma once

#include <cstdint>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "runtime/options/field.h"

namespace tower {

// Text to values, each throwing tower::AgreedError that names the field `id` in backquotes and
// says what to give instead.
int64_t parse_integer_field(const std::string& id, const std::string& text, FieldRange range);
uint64_t parse_unsigned_field(const std::string& id, const std::string& text);
[[noreturn]] void refuse_out_of_type(const std::string& id, const std::string& text, bool integer, FieldRange range);
double parse_number_field(const std::string& id, const std::string& text, FieldRange range);
bool parse_bool_field(const std::string& id, const std::string& text);
// `text` when it is one of `names`, else the error listing them.
const std::string& parse_choice_field(const std::string& id, const std::string& text, const std::vector<std::string>& names);

template <typename Config, typename T> using FieldAccess = std::function<T&(Config&)>;

// A field whose value has a text form of its own: `parse` throws for what it cannot take,
// `print` writes what `parse` reads, and `other` gives another valid value.
template <typename Config, typename T>
Field<Config> custom_field(std::string id, std::string help, FieldAccess<Config, T> access,
			   std::function<T(const std::string&)> parse, std::function<std::string(const T&)> print,
			   std::function<T(const T&)> other)
{
	Field<Config> f;
	f.id = std::move(id);
	f.help = std::move(help);
	f.get = [access, print](const Config& c) { return print(access(const_cast<Config&>(c))); };
	f.set = [access, parse](Config& c, const std::string& text) { access(c) = parse(text); };
	f.other = [access, print, other](const Config& c) { return print(other(access(const_cast<Config&>(c)))); };
	return f;
}

// An integer or floating-point member.
template <typename Config, typename T>
Field<Config> number_field(std::string id, std::string help, FieldAccess<Config, T> access,
			   FieldRange range = FieldRange::any)
{
	const std::string name = id;
	std::function<T(const std::string&)> parse;
	if constexpr (std::is_floating_point_v<T>)
		parse = [name, range](const std::string& t) {
			const T v = static_cast<T>(parse_number_field(name, t, range));
			// A float field given more than a float holds, or a positive one so little that it
			// rounds to 0 (2e-67 read as a float is 0, which the field then refuses to read back).
			if (!std::isfinite(v) || (range == FieldRange::positive && !(v > 0)))
				refuse_out_of_type(name, t, false, range);
			return v;
		};
	else if constexpr (std::is_unsigned_v<T>)
		parse = [name](const std::string& t) { return static_cast<T>(parse_unsigned_field(name, t)); };
	else
		parse = [name, range](const std::string& t) {
			const int64_t v = parse_integer_field(name, t, range);
			if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
			    v > static_cast<int64_t>(std::numeric_limits<T>::max()))
				refuse_out_of_type(name, t, true, range); // an int field given more than an int holds
			return static_cast<T>(v);
		};
	Field<Config> f = custom_field<Config, T>(
		std::move(id), std::move(help), access, parse, [](const T& v) { return fmt::format("{}", v); },
		[](const T& v) { return static_cast<T>(v + 1); });
	f.kind = std::is_floating_point_v<T> ? FieldKind::number : FieldKind::integer;
	f.range = range;
	return f;
}

// A bool member, "true" or "false"; `is_switch` where a command line turns it on by naming it.
template <typename Config>
Field<Config> bool_field(std::string id, std::string help, FieldAccess<Config, bool> access, bool is_switch = false)
{
	const std::string name = id;
	Field<Config> f = custom_field<Config, bool>(
		std::move(id), std::move(help), access, [name](const std::string& t) { return parse_bool_field(name, t); },
		[](const bool& v) { return std::string(v ? "true" : "false"); }, [](const bool& v) { return !v; });
	f.kind = FieldKind::boolean;
	f.is_switch = is_switch;
	return f;
}

// A string member that holds one of `names`.
template <typename Config>
Field<Config> choice_field(std::string id, std::string help, FieldAccess<Config, std::string> access,
			   std::vector<std::string> names)
{
	const std::string name = id;
	return custom_field<Config, std::string>(
		std::move(id), std::move(help), access,
		[name, names](const std::string& t) { return parse_choice_field(name, t, names); },
		[](const std::string& v) { return v; },
		[names](const std::string& v) {
			for (size_t i = 0; i < names.size(); ++i)
				if (names[i] == v)
					return names[(i + 1) % names.size()];
			return names.front();
		});
}

// The rows of `inner` as rows of the configuration that holds it in `member`.
template <typename Outer, typename Inner>
std::vector<Field<Outer>> nested_fields(const std::vector<Field<Inner>>& inner, Inner Outer::*member)
{
	std::vector<Field<Outer>> out;
	for (const Field<Inner>& f : inner) {
		Field<Outer> g;
		g.id = f.id;
		g.help = f.help;
		g.kind = f.kind;
		g.range = f.range;
		g.get = [get = f.get, member](const Outer& c) { return get(c.*member); };
		g.set = [set = f.set, member](Outer& c, const std::string& t) { set(c.*member, t); };
		g.other = [other = f.other, member](const Outer& c) { return other(c.*member); };
		g.must_agree = f.must_agree;
		if (f.agreed)
			g.agreed = [agreed = f.agreed, member](const Outer& c) { return agreed(c.*member); };
		g.may_change_on_resume = f.may_change_on_resume;
		g.strategies = f.strategies;
		if (f.applies)
			g.applies = [applies = f.applies, member](const Outer& c) { return applies(c.*member); };
		g.is_switch = f.is_switch;
		g.front_end = f.front_end;
		g.front_end_default = f.front_end_default;
		out.push_back(std::move(g));
	}
	return out;
}

} // namespace tower
