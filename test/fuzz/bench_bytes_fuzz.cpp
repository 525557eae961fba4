// libFuzzer target: `tower bench -b/-e` sizes ("8", "4K", "256M", "1G") against an exact reading of the text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/bench/bench.h"
#include "base/error.h"

namespace {

// Digits then at most one of K, M, G, read exactly; false for anything else or a count past 64 bits.
bool exact_bytes(const std::string& text, unsigned __int128* bytes)
{
	size_t i = 0;
	unsigned __int128 value = 0;
	for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
		value = value * 10 + static_cast<unsigned>(text[i] - '0');
		if (value > UINT64_MAX)
			return false;
	}
	if (i == 0)
		return false;
	const std::string suffix = text.substr(i);
	const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
	if (shift < 0)
		return false;
	*bytes = value << shift;
	return *bytes <= SIZE_MAX;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const std::string text(reinterpret_cast<const char*>(data), size);
	unsigned __int128 expected = 0;
	const bool valid = exact_bytes(text, &expected);
	try {
		const size_t bytes = tower::cli::parse_bytes(text);
		if (!valid || bytes != expected)
			std::abort(); // accepted something that is not that many bytes
	} catch (const tower::Error&) {
	}
	return 0;
}
