// What a resumed `tower train` must share with the run that wrote its checkpoint.
#include "cli/train/train_identity.h"

#include "base/error.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"

namespace tower::cli {

namespace {

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

} // namespace

nlohmann::json run_identity(const ModelConfig& model, const TrainerConfig& trainer)
{
	nlohmann::json j = nlohmann::json::object();
	add_identity(j, model_fields(), model);
	add_identity(j, trainer_fields(), trainer);
	return j;
}

nlohmann::json read_identity(const nlohmann::json& saved, const nlohmann::json& now)
{
	bool by_flag = false;
	for (const auto& [key, value] : saved.items())
		by_flag = by_flag || key.starts_with("--");
	if (!by_flag)
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
	for (const auto& [key, value] : now.items())
		if (!out.contains(key))
			out[key] = value;
	return out;
}

} // namespace tower::cli
