// libFuzzer target: any text into any row of the option tables (runtime/options/run_fields.h). A
// value a row takes writes back as text that the row reads to the same value.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "runtime/options/run_fields.h"

namespace {

template <typename Config> void round_trip(const tower::Field<Config>& row, const std::string& text)
{
	Config c;
	try {
		row.set(c, text);
	} catch (const tower::Error&) {
		return;
	}
	const std::string written = row.get(c);
	Config again;
	row.set(again, written); // a row must read what it writes
	if (row.get(again) != written)
		std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size == 0)
		return 0;
	const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
	const auto& trainer = tower::trainer_fields();
	const auto& model = tower::model_fields();
	const size_t pick = data[0] % (trainer.size() + model.size());
	if (pick < trainer.size())
		round_trip(trainer[pick], text);
	else
		round_trip(model[pick - trainer.size()], text);
	return 0;
}
