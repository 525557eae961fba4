// What must be equal on every rank of a run, as named fields, and the check that it is.
#pragma once

// Ranks started with different options (a typo in one line of an MPMD launch, a stale config on
// one node) either hang or train silently with something no rank asked for. Before the first
// collective of a run, every rank's fingerprint is compared (agree_on_fields) and a difference is
// an error on every rank naming each differing option and its value per rank.
//
// The fields are named by tower train's flags. Adding an option that changes what is computed or
// communicated is one add() line in run_fingerprint.cpp, in the describe() of the struct that
// holds it; options that may differ are listed there too, each with why.

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "base/mpi/agree.h"

namespace tower {

class SampleSet;
struct Device;
struct OptimizerConfig;
struct ScheduleConfig;
struct StrategyOptions;
class Model;
struct Parameter;

class RunFingerprint {
public:
	template <typename T> void add(std::string_view name, const T& value)
	{
		fields_.push_back({std::string(name), fmt::format("{}", value)});
	}
	void append(const RunFingerprint& other) { fields_.insert(fields_.end(), other.fields_.begin(), other.fields_.end()); }
	const std::vector<AgreedField>& fields() const { return fields_; }

private:
	std::vector<AgreedField> fields_;
};

// The lists. Each covers its struct whole (the trainer's, runtime/training/trainer.h, includes
// its optimizer, schedule and strategy). The model is known by its parameters (names, shapes, dtypes), a data set by its size
// and a checksum of its contents, the build by tower's version and configuration.
void describe(RunFingerprint& f, const OptimizerConfig& o);
void describe(RunFingerprint& f, const ScheduleConfig& s);
void describe(RunFingerprint& f, const StrategyOptions& s);
void describe(RunFingerprint& f, Model& model, const Device& device);
void describe_parameters(RunFingerprint& f, const std::vector<Parameter*>& parameters, const Device& device);
void describe(RunFingerprint& f, const SampleSet& data, std::string_view split);
void describe_build(RunFingerprint& f);

// Options left out on purpose, with why: each "--flag: reason".
const std::vector<std::string>& options_that_may_differ();

// Collective over `comm`: tower::AgreedError on every rank when the fingerprints differ.
void check_run_agreement(MPI_Comm comm, const RunFingerprint& mine);

} // namespace tower
