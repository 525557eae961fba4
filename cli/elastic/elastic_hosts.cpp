// The hosts an elastic job may run on: its hostfile, which hosts still answer, and their slots.
#include "cli/elastic/elastic_hosts.h"

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/elastic/child_process.h"

namespace tower::cli {

std::vector<HostSlots> read_hostfile(const std::string& path)
{
	std::ifstream in(path);
	if (!in)
		throw Error(fmt::format("tower elastic --hostfile {}: cannot read it", path));
	std::vector<HostSlots> hosts;
	std::string line;
	for (int number = 1; std::getline(in, line); ++number) {
		line = line.substr(0, line.find('#'));
		std::istringstream words(line);
		HostSlots h;
		if (!(words >> h.host))
			continue;
		for (std::string w; words >> w;) {
			if (w.rfind("slots=", 0) != 0)
				continue;
			try {
				h.slots = std::stoi(w.substr(6));
			} catch (const std::exception&) {
				h.slots = -1;
			}
			if (h.slots < 1)
				throw Error(fmt::format("tower elastic --hostfile {}, line {}: '{}': give slots=N with N >= 1",
							path, number, w));
		}
		hosts.push_back(h);
	}
	if (hosts.empty())
		throw Error(fmt::format("tower elastic --hostfile {}: no host in it", path));
	return hosts;
}

void write_hostfile(const std::string& path, const std::vector<HostSlots>& hosts)
{
	std::ofstream out(path, std::ios::trunc);
	for (const HostSlots& h : hosts)
		if (h.slots > 0)
			out << h.host << " slots=" << h.slots << "\n";
	if (!out)
		throw Error(fmt::format("tower elastic: cannot write the hostfile {}", path));
}

int total_slots(const std::vector<HostSlots>& hosts)
{
	int n = 0;
	for (const HostSlots& h : hosts)
		n += std::max(h.slots, 0);
	return n;
}

std::vector<bool> probe_hosts(const ElasticOptions& options, const std::vector<HostSlots>& hosts)
{
	std::vector<std::unique_ptr<ChildProcess>> probes;
	for (const HostSlots& h : hosts) {
		std::vector<std::string> argv = {options.mpirun};
		argv.insert(argv.end(), options.mpirun_args.begin(), options.mpirun_args.end());
		argv.insert(argv.end(), {"--host", h.host, "-np", "1", "true"});
		probes.push_back(std::make_unique<ChildProcess>(argv, std::vector<std::pair<std::string, std::string>>{}, false));
	}
	// All at once, so the wait is one timeout however many hosts are silent; a probe still
	// running at the deadline is killed with its group (the destructor) and counts as silent.
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.probe_timeout_s);
	std::vector<bool> answered(hosts.size(), false);
	for (bool pending = true; pending && std::chrono::steady_clock::now() < deadline;) {
		pending = false;
		for (auto& p : probes)
			pending = !p->exited() || pending;
		if (pending)
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
	}
	for (size_t i = 0; i < probes.size(); ++i)
		answered[i] = probes[i]->exited() && probes[i]->status() == 0;
	return answered;
}

} // namespace tower::cli
