// The run's timeline: Chrome trace events (Perfetto, chrome://tracing), one track per rank.
#include "runtime/observe/timeline.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "base/mpi/agree.h"
#include "base/error.h"
#include "base/mpi/gather.h"
#include "base/mpi/mpi_check.h"
#include "base/watchdog/watched_wait.h"

namespace tower::timeline {

namespace detail {
std::atomic<bool> recording{false};
} // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// Written out whole events at a time: a killed run loses at most this long of its end.
constexpr auto flush_interval = std::chrono::seconds(1);
constexpr size_t flush_bytes = size_t{1} << 18;

// One per process and never destroyed, so a span ending on another thread while finish() runs
// finds the recorder closed rather than gone. Everything below is guarded by `mutex`, except the
// two atomics a span reads without it: a thread's span may begin in one recording and end while
// start() sets up the next.
struct Recorder {
	std::mutex mutex;
	std::FILE* file = nullptr;
	std::string path, part_path;
	int rank = 0;
	std::atomic<int64_t> origin_ns{0}; // the recording's time 0 on the steady clock
	Clock::time_point last_flush;
	std::string pending;
	std::atomic<int> generation{0}; // counts recordings; thread ids restart with each
	int next_tid = 0;
};

int64_t steady_ns()
{
	return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

Recorder& recorder()
{
	static auto* r = new Recorder;
	return *r;
}

struct ThreadIdentity {
	int generation = -1;
	int tid = 0;
	const char* name = nullptr;
};
thread_local ThreadIdentity this_thread;

std::string part_path_of(const std::string& path, int rank)
{
	return fmt::format("{}.rank{}", path, rank);
}

void append_json_string(std::string* out, std::string_view text)
{
	out->push_back('"');
	for (const char c : text) {
		if (c == '"' || c == '\\')
			out->push_back('\\');
		if (static_cast<unsigned char>(c) < 0x20)
			*out += fmt::format("\\u{:04x}", static_cast<int>(c));
		else
			out->push_back(c);
	}
	out->push_back('"');
}

void flush_locked(Recorder& r)
{
	if (r.pending.empty() || r.file == nullptr)
		return;
	std::fwrite(r.pending.data(), 1, r.pending.size(), r.file);
	std::fflush(r.file);
	r.pending.clear();
	r.last_flush = Clock::now();
}

// After an event was appended to r.pending: writes it out when enough has gathered.
void flush_if_due(Recorder& r)
{
	if (r.pending.size() >= flush_bytes || Clock::now() - r.last_flush >= flush_interval)
		flush_locked(r);
}

// The calling thread's row, named in the trace the first time it records.
int tid_locked(Recorder& r)
{
	const int generation = r.generation.load(std::memory_order_relaxed);
	if (this_thread.generation == generation)
		return this_thread.tid;
	this_thread.generation = generation;
	this_thread.tid = r.next_tid++;
	const std::string name = this_thread.name ? this_thread.name
			       : this_thread.tid == 0 ? std::string("main")
						     : fmt::format("thread {}", this_thread.tid);
	fmt::format_to(std::back_inserter(r.pending), R"(,{{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":)",
		       r.rank, this_thread.tid);
	append_json_string(&r.pending, name);
	r.pending += "}}\n";
	flush_if_due(r);
	return this_thread.tid;
}

void close_locked(Recorder& r)
{
	detail::recording.store(false, std::memory_order_relaxed);
	flush_locked(r);
	if (r.file)
		std::fclose(r.file);
	r.file = nullptr;
}

std::string read_file(const std::string& path)
{
	std::ifstream in(path, std::ios::binary);
	std::ostringstream text;
	text << in.rdbuf();
	return text.str();
}

// The merged trace: one JSON array of every rank's events. Each part holds its rank's events
// after the opening bracket, the first bare and every later one led by a comma.
std::string merge(const std::vector<std::string>& parts)
{
	std::string out = "[\n";
	for (size_t i = 0; i < parts.size(); ++i) {
		if (i > 0)
			out += ",";
		out += parts[i];
	}
	out += "]\n";
	return out;
}

std::string write_merged(const std::string& path, const std::string& text)
{
	const std::string temporary = path + ".merging";
	std::FILE* f = std::fopen(temporary.c_str(), "w");
	if (!f)
		return fmt::format("cannot write timeline '{}': {}", temporary, std::strerror(errno));
	const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
	if (std::fclose(f) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0)
		return fmt::format("cannot write timeline '{}': {}", path, std::strerror(errno));
	return {};
}

} // namespace

namespace detail {

int generation()
{
	return recorder().generation.load(std::memory_order_acquire);
}

double now_us()
{
	return 1e-3 * static_cast<double>(steady_ns() - recorder().origin_ns.load(std::memory_order_relaxed));
}

void write_complete(const char* name, const char* category, int generation, double start_us, double end_us,
		    const std::string& args)
{
	Recorder& r = recorder();
	std::lock_guard lock(r.mutex);
	if (r.file == nullptr || generation != r.generation.load(std::memory_order_relaxed))
		return; // the recording ended while the span ran (and another may have begun)
	const int tid = tid_locked(r);
	// Formatted straight into the pending buffer: no allocation per event once it has grown.
	fmt::format_to(std::back_inserter(r.pending), R"(,{{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.1f},"dur":{:.1f})",
		       name, category, r.rank, tid, start_us, end_us - start_us);
	if (!args.empty()) {
		r.pending += R"(,"args":{)";
		r.pending += args;
		r.pending += '}';
	}
	r.pending += "}\n";
	flush_if_due(r);
}

} // namespace detail

void Span::add_key(const char* key)
{
	if (!args_.empty())
		args_ += ',';
	args_ += '"';
	args_ += key;
	args_ += "\":";
}

Span& Span::arg(const char* key, int64_t value)
{
	if (start_us_ >= 0) {
		add_key(key);
		fmt::format_to(std::back_inserter(args_), "{}", value);
	}
	return *this;
}

Span& Span::arg(const char* key, std::string_view value)
{
	if (start_us_ >= 0) {
		add_key(key);
		append_json_string(&args_, value);
	}
	return *this;
}

void name_thread(const char* name)
{
	this_thread.name = name;
}

void start(MPI_Comm comm, const std::string& path)
{
	int rank = 0;
	TOWER_MPI(MPI_Comm_rank(comm, &rank));
	Recorder& r = recorder();
	std::string problem;
	{
		std::lock_guard lock(r.mutex);
		if (r.file != nullptr) {
			problem = fmt::format("a timeline is already being recorded to '{}'; finish it first", r.path);
		} else {
			r.path = path;
			r.part_path = part_path_of(path, rank);
			r.rank = rank;
			r.file = std::fopen(r.part_path.c_str(), "w");
			if (!r.file)
				problem = fmt::format("cannot write timeline part '{}': {}; choose a writable `timeline` path",
						      r.part_path, std::strerror(errno));
		}
	}
	try {
		agree(comm, problem);
	} catch (const AgreedError&) {
		// Another rank could not open its part: this rank's, if opened, goes too.
		std::lock_guard lock(r.mutex);
		if (r.file != nullptr && problem.empty()) {
			std::fclose(r.file);
			r.file = nullptr;
			std::remove(r.part_path.c_str());
		}
		throw;
	}
	MPI_Request request = MPI_REQUEST_NULL;
	TOWER_MPI(MPI_Ibarrier(comm, &request));
	wait_request(request, {"timeline start", comm});
	std::lock_guard lock(r.mutex);
	// The origin before the generation: a span that reads the new generation reads the new origin.
	r.origin_ns.store(steady_ns(), std::memory_order_relaxed);
	r.last_flush = Clock::now();
	r.generation.fetch_add(1, std::memory_order_release);
	r.next_tid = 0;
	r.pending = fmt::format("[\n"
				R"({{"name":"process_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"rank {0}"}}}})"
				"\n"
				R"(,{{"name":"process_sort_index","ph":"M","pid":{0},"tid":0,"args":{{"sort_index":{0}}}}})"
				"\n",
				rank);
	flush_locked(r);
	detail::recording.store(true, std::memory_order_release);
}

void abandon()
{
	Recorder& r = recorder();
	std::lock_guard lock(r.mutex);
	close_locked(r);
}

namespace {

struct BeforeFinish {
	std::mutex mutex;
	int next = 0;
	std::map<int, std::function<void()>> writers;
};

BeforeFinish& before_finish()
{
	static BeforeFinish b;
	return b;
}

// Holding the mutex while they run: a writer's owner cannot go away in the middle (it removes
// itself under the same mutex).
void write_pending_spans()
{
	BeforeFinish& b = before_finish();
	std::lock_guard lock(b.mutex);
	for (auto& [handle, write] : b.writers)
		write();
}

} // namespace

int detail::add_before_finish(std::function<void()> write_pending)
{
	BeforeFinish& b = before_finish();
	std::lock_guard lock(b.mutex);
	const int handle = b.next++;
	b.writers.emplace(handle, std::move(write_pending));
	return handle;
}

void detail::remove_before_finish(int handle)
{
	BeforeFinish& b = before_finish();
	std::lock_guard lock(b.mutex);
	b.writers.erase(handle);
}

void finish(MPI_Comm comm)
{
	write_pending_spans();
	Recorder& r = recorder();
	std::string part_path, path;
	{
		std::lock_guard lock(r.mutex);
		close_locked(r);
		part_path = r.part_path;
		path = r.path;
	}
	std::string mine = read_file(part_path);
	// Each part starts with the array's "[" line; the merged file has one.
	if (mine.rfind("[\n", 0) == 0)
		mine.erase(0, 2);
	const std::vector<std::string> parts = gather_strings(comm, mine);
	int rank = 0;
	TOWER_MPI(MPI_Comm_rank(comm, &rank));
	agree(comm, rank == 0 ? write_merged(path, merge(parts)) : std::string());
	std::remove(part_path.c_str());
}

Recording::Recording(MPI_Comm comm, const std::string& path) : comm_(comm)
{
	if (path.empty())
		return;
	start(comm, path);
	active_ = true;
}

Recording::~Recording()
{
	if (active_)
		abandon();
}

void Recording::finish()
{
	if (!active_)
		return;
	active_ = false;
	timeline::finish(comm_);
}

} // namespace tower::timeline
