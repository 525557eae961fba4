// Error types and check macros shared by all of tower's modules.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tower {

// A failure seen by this rank alone (bad file, broken invariant). The job cannot go on: the
// top level prints it with the rank and aborts every rank.
class Error : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

// A failure every rank raised at the same point with the same verdict (bad arguments, a
// mismatch found by a collective check). The ranks can leave together and cleanly.
class AgreedError : public Error {
public:
	using Error::Error;
};

} // namespace tower

// Throws tower::Error naming the failed condition and its place when cond is false.
#define TOWER_CHECK(cond, ...)                                                              \
	do {                                                                                \
		if (!(cond))                                                                \
			throw ::tower::Error(fmt::format("{}:{}: check '{}' failed: {}", __FILE__, \
							 __LINE__, #cond, fmt::format(__VA_ARGS__))); \
	} while (0)

// Throws tower::Error showing both values when a != b.
#define TOWER_CHECK_EQ(a, b, what)                                                          \
	do {                                                                                \
		const auto& tower_a_ = (a);                                                 \
		const auto& tower_b_ = (b);                                                 \
		if (!(tower_a_ == tower_b_))                                                \
			throw ::tower::Error(fmt::format("{}:{}: {}: {} = {} but {} = {}", __FILE__, \
							 __LINE__, what, #a, tower_a_, #b, tower_b_)); \
	} while (0)
