// JSON-lines metrics file: one object per line, complete lines only, renamed into place at the end.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace tower {

// Lines go to "PATH.partial" and are flushed one by one, so a reader (or a crash) never sees a
// half-written line; finish() renames the file to PATH, so PATH exists only for a complete run.
class MetricsLog {
public:
	MetricsLog() = default; // writes nothing
	// Throws tower::Error naming the path and the reason when it cannot be opened.
	explicit MetricsLog(const std::string& path);
	~MetricsLog();
	MetricsLog(const MetricsLog&) = delete;
	MetricsLog& operator=(const MetricsLog&) = delete;
	MetricsLog(MetricsLog&& other) noexcept;
	MetricsLog& operator=(MetricsLog&& other) noexcept;

	bool enabled() const { return file_ != nullptr; }
	void write(const nlohmann::json& line);
	// Closes the file and renames it into place.
	void finish();

private:
	std::string path_;
	std::FILE* file_ = nullptr;
};

} // namespace tower
