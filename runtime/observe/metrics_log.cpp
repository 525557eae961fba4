// JSON-lines metrics file: one object per line, complete lines only, renamed into place at the end.
#include "runtime/observe/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace tower {

MetricsLog::MetricsLog(const std::string& path) : path_(path)
{
	const std::string partial = path + ".partial";
	file_ = std::fopen(partial.c_str(), "w");
	if (!file_)
		throw Error(fmt::format("cannot write metrics file '{}': {}; choose a writable `metrics` path",
					partial, std::strerror(errno)));
}

MetricsLog::~MetricsLog()
{
	// An unfinished log stays as PATH.partial: it is not a complete run's record.
	if (file_)
		std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
	: path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr))
{
}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept
{
	if (this != &other) {
		if (file_)
			std::fclose(file_);
		path_ = std::move(other.path_);
		file_ = std::exchange(other.file_, nullptr);
	}
	return *this;
}

void MetricsLog::write(const nlohmann::json& line)
{
	if (!file_)
		return;
	const std::string text = line.dump() + "\n";
	if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
		throw Error(fmt::format("writing metrics file '{}.partial' failed: {}", path_, std::strerror(errno)));
}

void MetricsLog::finish()
{
	if (!file_)
		return;
	const bool closed = std::fclose(std::exchange(file_, nullptr)) == 0;
	const std::string partial = path_ + ".partial";
	if (!closed || std::rename(partial.c_str(), path_.c_str()) != 0)
		throw Error(fmt::format("finishing metrics file '{}' failed: {}", path_, std::strerror(errno)));
}

} // namespace tower
