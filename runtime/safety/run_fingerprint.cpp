// What must be equal on every rank of a run, as named fields, and the check that it is.
#include "runtime/safety/run_fingerprint.h"

#include "data/sample_set.h"
#include "models/model.h"
#include "base/watchdog/collective_debug.h"
#include "base/content_hash.h"
#include "base/device/device.h"
#include "tower_config.h"

namespace tower {

void describe(RunFingerprint& f, Model& model, const Device& device)
{
	describe_parameters(f, model.parameters(), device);
}

void describe_parameters(RunFingerprint& f, const std::vector<Parameter*>& parameters, const Device& device)
{
	std::string signature;
	int64_t elements = 0;
	for (const Parameter* p : parameters) {
		signature += fmt::format("{} {} {};", p->name, dtype_name(p->value.dtype()), shape_text(p->value.shape()));
		elements += p->value.numel();
	}
	f.add("model", fmt::format("{} tensors, {} elements, signature {:016x}", parameters.size(), elements,
				   content_hash(signature.data(), signature.size())));
	f.add("device kind", device.is_cuda() ? "cuda" : "cpu");
}

void describe(RunFingerprint& f, const SampleSet& data, std::string_view split)
{
	f.add(fmt::format("{} data", split), data.describe());
}

void describe_build(RunFingerprint& f)
{
	f.add("tower version", TOWER_VERSION);
	f.add("tower build", fmt::format("cuda {}, compiler {}", TOWER_HAVE_CUDA ? "on" : "off", __VERSION__));
	// Ranks linked against different MPI libraries may not even agree on the wire.
	char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
	int length = 0;
	MPI_Get_library_version(library, &length);
	const std::string text(library, static_cast<size_t>(length));
	f.add("MPI library", text.substr(0, text.find_first_of(",\n")));
	// On for one rank only, the check's messages would meet nothing on the others.
	f.add("`debug_collectives`", collective_debug());
}

void check_run_agreement(MPI_Comm comm, const RunFingerprint& mine)
{
	agree_on_fields(comm, mine.fields(),
			"the ranks of this job were started with different options (start every rank with the same "
			"command line and data)");
}

} // namespace tower
