// Where each tensor of a checkpoint sits in the whole variable it belongs to, so that a checkpoint
// written under one placement of the variables (one owner, several, replicated) loads under another.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/tensor/named_tensor.h"
#include "runtime/checkpoint/checkpoint_file.h"

namespace tower {

// One saved tensor as a run of elements of a whole variable (flattened, row-major).
struct VariablePiece {
	std::string entry;    // its name in its file: "fc2.weight[0:131072]/momentum"
	std::string variable; // the whole variable's name: "fc2.weight/momentum"
	int64_t offset = 0;   // its first element in the whole variable
	int64_t count = 0;    // elements
	Shape whole;          // the whole variable's shape
	DType dtype = DType::f32;
	std::string file;     // the file that holds it (filled in when an index of a checkpoint is built)

	nlohmann::json to_json() const;
	static VariablePiece from_json(const nlohmann::json& j);
};

// The shape of a whole variable by its name, or an empty shape when the caller knows none (the
// tensor is then taken to be whole).
using WholeShapeFn = std::function<Shape(const std::string& variable)>;

// The piece a named tensor is. The owner strategies name a slice of a variable "NAME[BEGIN:END]"
// (runtime/strategies/placement.h), and the state kept per slice "NAME[BEGIN:END]/SUFFIX"; any
// other name is a whole variable.
VariablePiece piece_of(const NamedTensor& tensor, const WholeShapeFn& whole_shape);

// The bytes of saved pieces, read from the files of one step directory as they are asked for (each
// file read and verified once).
class PieceFiles {
public:
	explicit PieceFiles(std::string step_dir) : step_dir_(std::move(step_dir)) {}
	// A host view of the piece's tensor, valid while this object lives. Throws CheckpointError
	// for a bad file.
	Tensor operator()(const VariablePiece& piece);

private:
	std::string step_dir_;
	std::map<std::string, CheckpointFile> files_;
};

// Fills `target` (a piece this run holds, possibly on a device) from the saved pieces of its
// variable that cover it, reading a saved piece's host bytes through `read`. Throws Error when the
// saved pieces leave part of it uncovered or disagree with it in type or whole shape.
void fill_from_pieces(const VariablePiece& target, Tensor& destination, const std::vector<VariablePiece>& saved,
		      const std::function<Tensor(const VariablePiece&)>& read);

} // namespace tower
