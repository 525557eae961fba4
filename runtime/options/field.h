// One option of a configuration, named by its field id: what it means, how it reads and writes as
// text, and the rules a run derives from it (agreement across ranks, resume, strategies).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tower {

// The values a numeric field takes, for checks and help texts.
enum class FieldRange { any, non_negative, positive };

// What a field's text is, for front ends that type their options.
enum class FieldKind { integer, number, boolean, text };

// A front end names a field by one rule from its id: `fusion_mb` is tower train's --fusion-mb and
// tower.torch's fusion_mb=. The library's own errors name fields by id in backquotes
// (`fusion_mb`), which a front end may print in its own spelling.
template <typename Config> struct Field {
	std::string id;
	std::string help;
	FieldKind kind = FieldKind::text;
	FieldRange range = FieldRange::any;
	// The value as text, in the form set() reads; set() throws tower::AgreedError naming the
	// field for a value it cannot take.
	std::function<std::string(const Config&)> get;
	std::function<void(Config&, const std::string&)> set;
	// A valid value other than the one `c` holds, as text: what the table's test gives one rank.
	std::function<std::string(const Config&)> other;
	// Every rank of a run must hold the same value; `agreed` (when set) is what is compared
	// instead of the value (whether a path is given, not the path).
	bool must_agree = true;
	std::function<std::string(const Config&)> agreed;
	// A resumed run may give another value than the run that wrote its checkpoint.
	bool may_change_on_resume = false;
	// The strategies that read it; empty: every one.
	std::vector<std::string> strategies;
	// Null: the field always applies; otherwise only where it returns true (the GPT's shape).
	std::function<bool(const Config&)> applies;
	// A bool that a command line turns on by naming it, without a value.
	bool is_switch = false;
	// False for a field the program sets from another (the data order's seed from the model's).
	bool front_end = true;
	// A front end's default where it differs from the library's, as text ("auto" for the
	// all-reduce mode of tower train, which picks by device; the library's is ring).
	std::string front_end_default;
};

// The field `id` of `table`, or nullptr.
template <typename Config> const Field<Config>* find_field(const std::vector<Field<Config>>& table, const std::string& id)
{
	for (const Field<Config>& f : table)
		if (f.id == id)
			return &f;
	return nullptr;
}

} // namespace tower
