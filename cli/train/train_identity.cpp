// What a resumed `tower train` must share with the run that wrote its checkpoint.
#include "cli/train/train_identity.h"

#include "base/error.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"

namespace tower::cli {

namespace {

// Manifests written before the option tables keyed the identity by tower train's flags.
bool keyed_by_flag(const nlohmann::json& saved)
{
	for (const auto& [key, value] : saved.items())
		if (key.starts_with("--"))
			return true;
	return false;
}

// "--loss-scale-init" -> "loss_scale_init".
std::string id_of_flag(const std::string& flag)
{
	std::string id = flag.substr(2);
	for (char& ch : id)
		if (ch == '-')
			ch = '_';
	return id;
}

// A value as a row writes it: read by the row and written again.
template <typename Config> std::optional<std::string> canonical(const std::vector<Field<Config>>& table,
								 const std::string& id, const std::string& text)
{
	const Field<Config>* f = find_field(table, id);
	if (f == nullptr)
		return std::nullopt;
	Config c;
	try {
		f->set(c, text);
	} catch (const Error&) {
		return text; // compared as it is, and reported if it differs
	}
	return f->get(c);
}

// The saved fields today's identity holds: a row since marked may-change, one that no longer
// applies, or one gone from the tables is not compared.
nlohmann::json only_fields_of(const nlohmann::json& saved, const nlohmann::json& now)
{
	nlohmann::json out = nlohmann::json::object();
	for (const auto& [key, value] : saved.items())
		if (now.contains(key))
			out[key] = value;
	return out;
}

} // namespace

nlohmann::json run_identity(const ModelConfig& model, const TrainerConfig& trainer)
{
	nlohmann::json j = nlohmann::json::object();
	add_identity(j, model_fields(), model);
	add_identity(j, trainer_fields(), trainer);
	return j;
}

nlohmann::json identity_by_id(const nlohmann::json& saved)
{
	if (!keyed_by_flag(saved))
		return saved;
	nlohmann::json out = nlohmann::json::object();
	for (const auto& [key, value] : saved.items()) {
		const std::string id = id_of_flag(key);
		const std::string text = value.is_string() ? value.get<std::string>() : value.is_null() ? "none" : value.dump();
		auto c = canonical(model_fields(), id, text);
		if (!c)
			c = canonical(trainer_fields(), id, text);
		out[id] = c.value_or(text);
	}
	return out;
}

nlohmann::json read_identity(const nlohmann::json& saved, const nlohmann::json& now)
{
	nlohmann::json out = identity_by_id(saved);
	// A manifest keyed by flag did not hold the fields added since; they were not compared then.
	if (keyed_by_flag(saved))
		for (const auto& [key, value] : now.items())
			if (!out.contains(key))
				out[key] = value;
	return only_fields_of(out, now);
}

} // namespace tower::cli
