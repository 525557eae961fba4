// The option tables (runtime/options/run_fields.h): every row reads what it writes, every field
// that must agree is an agreement error naming it when one rank holds another value, and one that
// may differ is not.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>
#include <string>

#include "base/error.h"
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"
#include "runtime/safety/run_fingerprint.h"
#include "test/harness/mpi_main.h"

using namespace tower;
using tower::test::world;

namespace {

// The agreement error every rank raised, or "" when none.
std::string agreement_error(const RunFingerprint& f)
{
	try {
		check_run_agreement(world().comm(), f);
	} catch (const AgreedError& e) {
		return e.what();
	}
	return "";
}

// The last rank gives `row` another value; the others keep `base`'s.
template <typename Config>
std::string with_one_rank_different(const std::vector<Field<Config>>& table, const Field<Config>& row, Config c)
{
	if (world().rank() == world().size() - 1)
		row.set(c, row.other(c));
	RunFingerprint f;
	describe_fields(f, table, c);
	return agreement_error(f);
}

template <typename Config> void check_agreement_of(const std::vector<Field<Config>>& table, const Config& base)
{
	for (const Field<Config>& row : table) {
		if (!field_applies(row, base))
			continue;
		const std::string message = with_one_rank_different(table, row, base);
		const std::string named = fmt::format("`{}` is ", row.id);
		if (row.must_agree)
			CHECK_MESSAGE(message.find(named) != std::string::npos, row.id, ": ", message);
		else
			CHECK_MESSAGE(message.empty(), row.id, " may differ but: ", message);
	}
}

template <typename Config> void check_rows_read_what_they_write(const std::vector<Field<Config>>& table)
{
	std::set<std::string> ids;
	for (const Field<Config>& row : table) {
		CHECK_MESSAGE(ids.insert(row.id).second, row.id, " is in the table twice");
		Config c;
		const std::string written = row.get(c);
		Config again;
		CHECK_NOTHROW(row.set(again, written));
		CHECK_MESSAGE(row.get(again) == written, row.id);
		const std::string other = row.other(c);
		CHECK_MESSAGE(other != written, row.id, ": other() gives the value it holds");
		CHECK_NOTHROW(row.set(again, other));
		CHECK_MESSAGE(row.get(again) == other, row.id);
	}
}

ModelConfig gpt()
{
	ModelConfig m;
	m.name = "gpt";
	return m;
}

} // namespace

TEST_CASE("every row reads what it writes, and other() is another value it reads")
{
	check_rows_read_what_they_write(trainer_fields());
	check_rows_read_what_they_write(model_fields());
}

TEST_CASE("ranks with different values of a field that must agree get the agreement error naming it")
{
	if (world().size() == 1)
		return;
	check_agreement_of(trainer_fields(), TrainerConfig{});
	check_agreement_of(model_fields(), ModelConfig{});
	check_agreement_of(model_fields(), gpt()); // the GPT's shape applies only to it
}

TEST_CASE("a bad value is an error naming the field in backquotes")
{
	TrainerConfig c;
	for (const auto& [id, text] : {std::pair<std::string, std::string>{"batch", "0"}, {"lr", "-1"}, {"groups", "0,a"},
				       {"max_staleness", "2x"}, {"allreduce", "butterfly"}, {"strategy", "gossip"}}) {
		std::string message;
		try {
			find_field(trainer_fields(), id)->set(c, text);
		} catch (const AgreedError& e) {
			message = e.what();
		}
		CHECK_MESSAGE(message.starts_with(fmt::format("`{}` ", id)), id, ": ", message);
	}
}

TEST_CASE("a value that becomes out of range as a float is refused, not written back unreadable")
{
	TrainerConfig c;
	const Field<TrainerConfig>* row = find_field(trainer_fields(), "outer_momentum");
	REQUIRE(row != nullptr);
	CHECK_THROWS_AS(row->set(c, "0.9999999999999931"), AgreedError); // 1.0f as a float
	row->set(c, "0.99999994");
	TrainerConfig again;
	CHECK_NOTHROW(row->set(again, row->get(c)));
}

TEST_CASE("the identity holds the fields a resume may not change")
{
	nlohmann::json identity = nlohmann::json::object();
	add_identity(identity, trainer_fields(), TrainerConfig{});
	for (const Field<TrainerConfig>& row : trainer_fields())
		CHECK_MESSAGE(identity.contains(row.id) == !row.may_change_on_resume, row.id);
	CHECK(identity.at("lr") == "0.05");
	CHECK(!identity.contains("epochs"));
}

TEST_CASE("a field given for a strategy that does not read it is named")
{
	std::string message;
	try {
		check_fields_read(trainer_fields(), {"fusion_mb"}, "async");
	} catch (const AgreedError& e) {
		message = e.what();
	}
	CHECK(message == "`fusion_mb` belongs to `strategy` replicated, not async; drop it");
	CHECK_NOTHROW(check_fields_read(trainer_fields(), {"fusion_mb", "lr"}, "replicated"));
}
