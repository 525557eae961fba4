// What must be equal on every rank of a run, as named fields, and the check that it is.
#pragma once

// Ranks started with different options (a typo in one line of an MPMD launch, a stale config on
// one node) either hang or train silently with something no rank asked for. Before the first
// collective of a run, every rank's fingerprint is compared (agree_on_fields) and a difference is
// an error on every rank naming each differing option and its value per rank.
//
// The options of a run are compared as their tables say (runtime/options/field_rules.h): each
// field that must agree, named by its id in backquotes. The model, the data and the build are
// described here; options that may differ say so in their rows (Field::must_agree, Field::agreed).

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "base/mpi/agree.h"

namespace tower {

class SampleSet;
struct Device;
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

// The model is known by its parameters (names, shapes, dtypes), a data set by its size and a
// checksum of its contents, the build by tower's version and configuration.
void describe(RunFingerprint& f, Model& model, const Device& device);
void describe_parameters(RunFingerprint& f, const std::vector<Parameter*>& parameters, const Device& device);
void describe(RunFingerprint& f, const SampleSet& data, std::string_view split);
void describe_build(RunFingerprint& f);

// Collective over `comm`: tower::AgreedError on every rank when the fingerprints differ.
void check_run_agreement(MPI_Comm comm, const RunFingerprint& mine);

} // namespace tower
