// What a run derives from an option table: the fields its ranks compare, its checkpoints'
// identity, and which given fields the chosen strategy does not read.
#pragma once

#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/options/field.h"
#include "runtime/safety/run_fingerprint.h"

namespace tower {

template <typename Config> bool field_applies(const Field<Config>& f, const Config& c)
{
	return !f.applies || f.applies(c);
}

// Every field that must agree, named `id` (backquoted: front ends print their own spelling).
template <typename Config>
void describe_fields(RunFingerprint& fingerprint, const std::vector<Field<Config>>& table, const Config& c)
{
	for (const Field<Config>& f : table)
		if (f.must_agree && field_applies(f, c))
			fingerprint.add(fmt::format("`{}`", f.id), f.agreed ? f.agreed(c) : f.get(c));
}

// The fields a resumed run must share with the run that wrote its checkpoint, by id, as text.
template <typename Config> void add_identity(nlohmann::json& identity, const std::vector<Field<Config>>& table, const Config& c)
{
	for (const Field<Config>& f : table)
		if (!f.may_change_on_resume && field_applies(f, c))
			identity[f.id] = f.get(c);
}

// tower::AgreedError naming the first field in `given` that `strategy` does not read.
template <typename Config>
void check_fields_read(const std::vector<Field<Config>>& table, const std::set<std::string>& given,
		       const std::string& strategy)
{
	for (const Field<Config>& f : table) {
		if (!given.count(f.id) || f.strategies.empty())
			continue;
		bool reads = false;
		for (const std::string& s : f.strategies)
			reads = reads || s == strategy;
		if (!reads)
			throw AgreedError(fmt::format("`{}` belongs to `strategy` {}, not {}; drop it", f.id,
						      fmt::join(f.strategies, " or "), strategy));
	}
}

} // namespace tower
