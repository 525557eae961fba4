// What a checkpoint saves of one part of a program: its variables on this rank, by name.
#pragma once

#include <string>
#include <vector>

#include "base/tensor/named_tensor.h"
#include "base/tensor/parameter.h"

namespace tower {

// A DistributedOptimizer is one; a program whose update another framework applies (tower.torch
// under replicated) gives the Checkpointer that framework's state through one of its own.
class Checkpointed {
public:
	virtual ~Checkpointed() = default;
	// Prefixes the variables' names ("<name>/..."); may be empty for a program's only part.
	virtual const std::string& name() const = 0;
	// The parameters whose whole shapes the variables take: "fc.weight", "fc.weight/momentum" and
	// a slice of either are pieces of fc.weight's shape. Counters belong to none and are whole.
	virtual const std::vector<Parameter*>& parameters() const = 0;
	// Whether this rank saves, and on resume loads, any variables.
	virtual bool saves_variables() const = 0;
	// This rank's variables, named "<name>/..." when the name is not empty: each whole, or a
	// slice named "<variable>[begin:end]" (runtime/checkpoint/variable_pieces.h). They share the
	// part's memory: a restore writes into them.
	virtual std::vector<NamedTensor> variables() = 0;
	// Collective, after a checkpoint's values were written into variables() on the saving ranks:
	// what the other ranks need of them reaches them.
	virtual void variables_restored() = 0;
};

} // namespace tower
