// The hosts an elastic job may run on: its hostfile, which hosts still answer, and their slots.
#pragma once

#include <string>
#include <vector>

#include "cli/elastic/elastic_options.h"

namespace tower::cli {

struct HostSlots {
	std::string host;
	int slots = 1;
};

// Reads mpirun's hostfile format: "HOST [slots=N] ..." per line, '#' comments. A host without
// slots= counts one. Throws tower::Error naming the line that is wrong.
std::vector<HostSlots> read_hostfile(const std::string& path);
// Writes the hosts with their slots; hosts with none are left out.
void write_hostfile(const std::string& path, const std::vector<HostSlots>& hosts);
int total_slots(const std::vector<HostSlots>& hosts);

// Whether each host answers: mpirun starts `true` on it over the same launch path as the job
// (the options' mpirun arguments), all hosts at once, each bounded by the probe timeout.
std::vector<bool> probe_hosts(const ElasticOptions& options, const std::vector<HostSlots>& hosts);

} // namespace tower::cli
