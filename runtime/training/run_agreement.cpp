// What must be equal on every rank of a trainer's run: its configuration, model, data and build.
#include "runtime/options/field_rules.h"
#include "runtime/options/run_fields.h"
#include "runtime/training/run.h"

namespace tower {

void describe(RunFingerprint& f, const TrainerConfig& c)
{
	describe_fields(f, trainer_fields(), c);
}

// Every rank runs the same configuration on the same data with the same build: checked before
// the run's first collective, so a difference is an error naming it rather than a hang.
bool check_trainer_agreement(const Topology& topology, const Device& device, Model& model, const SampleSet& train,
		     const SampleSet& test, const TrainerConfig& c)
{
	RunFingerprint f;
	describe(f, c);
	describe(f, model, device);
	describe(f, train, "training");
	describe(f, test, "test");
	describe_build(f);
	f.append(c.program_fields);
	check_run_agreement(topology.world(), f);
	return true;
}

} // namespace tower
