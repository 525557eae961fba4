// How a checkpoint directory is laid out (step directories, a file per saving rank, the manifest)
// and how the file work reports its problems; shared by the collective checkpoints and the owners'.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tower {

inline constexpr const char* manifest_name = "manifest.tck";

inline std::string rank_file_name(int rank)
{
	return fmt::format("rank-{:05d}.tck", rank);
}

// The step of a directory called "step-<digits>", or -1.
inline int64_t step_of(const std::filesystem::path& p)
{
	const std::string name = p.filename().string();
	if (name.size() <= 5 || name.rfind("step-", 0) != 0)
		return -1;
	const std::string digits = name.substr(5);
	if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 18)
		return -1;
	return std::stoll(digits);
}

// Step directories in `dir`, newest first; an absent directory has none.
inline std::vector<std::pair<int64_t, std::filesystem::path>> step_dirs(const std::string& dir)
{
	std::vector<std::pair<int64_t, std::filesystem::path>> out;
	std::error_code ec;
	for (const auto& e : std::filesystem::directory_iterator(dir, ec))
		if (e.is_directory() && step_of(e.path()) >= 0)
			out.emplace_back(step_of(e.path()), e.path());
	std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
	return out;
}

// Runs `fn` and turns any tower::Error or filesystem error into a problem string for agree().
template <typename Fn> std::string problem_of(Fn fn)
{
	try {
		fn();
	} catch (const Error& e) {
		return e.what();
	} catch (const std::filesystem::filesystem_error& e) {
		return e.what();
	} catch (const nlohmann::json::exception& e) {
		return e.what();
	}
	return {};
}

} // namespace tower
