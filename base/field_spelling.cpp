// How a front end spells the library's option fields.
#include "base/field_spelling.h"

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

namespace {

bool id_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (!first && ((c >= '0' && c <= '9') || c == '_'));
}

// The length of a field id starting at `from` and closed by a backquote, or 0.
size_t id_length(const std::string& text, size_t from)
{
	size_t n = 0;
	while (from + n < text.size() && id_char(text[from + n], n == 0))
		++n;
	return n > 0 && from + n < text.size() && text[from + n] == '`' ? n : 0;
}

} // namespace

std::string spelled(const std::string& message)
{
	const auto& spell = spelling();
	if (!spell)
		return message;
	std::string out;
	for (size_t i = 0; i < message.size(); ++i) {
		const size_t n = message[i] == '`' ? id_length(message, i + 1) : 0;
		if (n == 0) {
			out += message[i];
			continue;
		}
		out += spell(message.substr(i + 1, n));
		i += n + 1; // past the closing backquote
	}
	return out;
}

} // namespace tower
