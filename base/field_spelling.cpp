// How a front end spells the library's option fields.
#include "base/field_spelling.h"

#include <regex>

namespace tower {

namespace {

std::function<std::string(const std::string&)>& spelling()
{
	static std::function<std::string(const std::string&)> spell;
	return spell;
}

} // namespace

void set_field_spelling(std::function<std::string(const std::string& id)> spell)
{
	spelling() = std::move(spell);
}

std::string spelled(const std::string& message)
{
	const auto& spell = spelling();
	if (!spell)
		return message;
	static const std::regex field("`([a-z][a-z0-9_]*)`");
	std::string out;
	auto last = message.cbegin();
	for (std::sregex_iterator it(message.begin(), message.end(), field), end; it != end; ++it) {
		out.append(last, message.cbegin() + it->position());
		out += spell((*it)[1].str());
		last = message.cbegin() + it->position() + it->length();
	}
	out.append(last, message.cend());
	return out;
}

} // namespace tower
