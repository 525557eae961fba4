// What must be equal on every rank of a trainer's run: its configuration, model, data and build.
#include "runtime/training/run.h"

namespace tower {

void describe(RunFingerprint& f, const TrainerConfig& c)
{
	describe(f, c.optimizer);
	describe(f, c.schedule);
	describe(f, c.strategy);
	f.add("--epochs", c.epochs);
	f.add("--batch", c.batch);
	f.add("--accumulate", c.accumulate);
	f.add("--max-steps", c.max_steps);
	f.add("--seed (data order)", c.data_seed);
	// Each of these paces a collective: the loss of the logging window, the replica check,
	// the evaluation.
	f.add("--log-every", c.log_every);
	f.add("--eval-every", c.eval_every);
	f.add("--check-every", c.check_every);
	// Checkpoints are written and verified together, and the timeline is merged on rank 0: a rank
	// without them would leave the others waiting. Their paths may differ (listed below).
	f.add("writing checkpoints", !c.checkpoint.dir.empty());
	f.add("--checkpoint-every", c.checkpoint.every);
	f.add("--keep-checkpoints", c.checkpoint.keep);
	f.add("resuming from a checkpoint", c.checkpoint.resume);
	f.add("recording a timeline", !c.timeline_path.empty());
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
