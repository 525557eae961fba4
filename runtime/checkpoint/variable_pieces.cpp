// Where each tensor of a checkpoint sits in the whole variable it belongs to (variable_pieces.h).
#include "runtime/checkpoint/variable_pieces.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"

namespace tower {

nlohmann::json VariablePiece::to_json() const
{
	return {{"entry", entry}, {"variable", variable}, {"offset", offset}, {"count", count},
		{"whole", whole},  {"dtype", dtype_name(dtype)}, {"file", file}};
}

VariablePiece VariablePiece::from_json(const nlohmann::json& j)
{
	VariablePiece p;
	p.entry = j.at("entry").get<std::string>();
	p.variable = j.at("variable").get<std::string>();
	p.offset = j.at("offset").get<int64_t>();
	p.count = j.at("count").get<int64_t>();
	p.whole = j.at("whole").get<Shape>();
	p.dtype = parse_dtype(j.at("dtype").get<std::string>());
	p.file = j.value("file", "");
	// Each dimension and the product bounded, so a corrupt index cannot overflow the arithmetic.
	bool dims_sane = p.whole.size() <= 8;
	int64_t elements = 1;
	for (int64_t d : p.whole) {
		dims_sane = dims_sane && d >= 0 && (d == 0 || elements <= (int64_t{1} << 50) / d);
		if (dims_sane)
			elements *= d;
	}
	if (!dims_sane || p.offset < 0 || p.count < 0 || p.offset > shape_numel(p.whole) ||
	    p.count > shape_numel(p.whole) - p.offset)
		throw Error(fmt::format("piece '{}': elements [{}, {}) do not fit its variable's shape {}", p.entry, p.offset,
					p.offset + p.count, shape_text(p.whole)));
	return p;
}

namespace {

// "NAME[BEGIN:END]" or "NAME[BEGIN:END]/SUFFIX", as placement.cpp cuts them: where the range is
// (the '[' and one past the ']') and its bounds; false for any other name.
bool find_range(const std::string& name, size_t* open, size_t* close, int64_t* begin, int64_t* end)
{
	const auto digits = [&](size_t at, int64_t* value) {
		size_t n = 0;
		*value = 0;
		for (; at + n < name.size() && name[at + n] >= '0' && name[at + n] <= '9' && n < 18; ++n)
			*value = *value * 10 + (name[at + n] - '0');
		return n;
	};
	for (size_t i = name.find('['); i != std::string::npos; i = name.find('[', i + 1)) {
		const size_t a = digits(i + 1, begin);
		if (a == 0 || i + 1 + a >= name.size() || name[i + 1 + a] != ':')
			continue;
		const size_t b = digits(i + 2 + a, end);
		const size_t after = i + 2 + a + b; // the ']'
		if (b == 0 || after >= name.size() || name[after] != ']')
			continue;
		if (after + 1 == name.size() || name[after + 1] == '/') {
			*open = i;
			*close = after + 1;
			return true;
		}
	}
	return false;
}

} // namespace

VariablePiece piece_of(const NamedTensor& tensor, const WholeShapeFn& whole_shape)
{
	VariablePiece p;
	p.entry = tensor.name;
	p.variable = tensor.name;
	p.count = tensor.tensor.numel();
	p.dtype = tensor.tensor.dtype();
	size_t open = 0, close = 0;
	int64_t begin = 0, end = 0;
	if (find_range(tensor.name, &open, &close, &begin, &end)) {
		p.variable = tensor.name.substr(0, open) + tensor.name.substr(close);
		p.offset = begin;
		if (end - begin != p.count)
			throw Error(fmt::format("'{}' names {} elements but holds {}", tensor.name, end - begin, p.count));
	}
	p.whole = whole_shape ? whole_shape(p.variable) : Shape{};
	if (p.whole.empty() || (p.offset == 0 && shape_numel(p.whole) != p.count && p.variable == p.entry))
		p.whole = tensor.tensor.shape();
	if (p.offset + p.count > shape_numel(p.whole))
		throw Error(fmt::format("'{}' reaches element {} of a variable of shape {}", tensor.name, p.offset + p.count,
					shape_text(p.whole)));
	return p;
}

Tensor PieceFiles::operator()(const VariablePiece& piece)
{
	auto it = files_.find(piece.file);
	if (it == files_.end())
		it = files_.emplace(piece.file, read_checkpoint_file((std::filesystem::path(step_dir_) / piece.file).string()))
			     .first;
	const CheckpointEntry* entry = it->second.find(piece.entry);
	if (entry == nullptr)
		throw CheckpointError(fmt::format("{}: no tensor '{}'", piece.file, piece.entry));
	return it->second.tensor(*entry);
}

void fill_from_pieces(const VariablePiece& target, Tensor& destination, const std::vector<VariablePiece>& saved,
		      const std::function<Tensor(const VariablePiece&)>& read)
{
	std::vector<const VariablePiece*> mine;
	for (const VariablePiece& p : saved)
		if (p.variable == target.variable)
			mine.push_back(&p);
	if (mine.empty())
		throw Error(fmt::format("'{}' is not in the checkpoint", target.variable));
	const size_t element = dtype_size(target.dtype);
	Tensor host = Tensor::empty(destination.shape(), destination.dtype(), Device{});
	auto* out = static_cast<std::byte*>(host.data());
	const int64_t end = target.offset + target.count;
	for (int64_t at = target.offset; at < end;) {
		// The first saved piece holding element `at` (several owners save the same whole
		// counters; the first file's copy is taken).
		const auto found = std::find_if(mine.begin(), mine.end(), [&](const VariablePiece* p) {
			return p->offset <= at && at < p->offset + p->count;
		});
		if (found == mine.end())
			throw Error(fmt::format("elements [{}, {}) of '{}' are in no file of the checkpoint", at, end,
						target.variable));
		const VariablePiece& p = **found;
		if (p.dtype != target.dtype || p.whole != target.whole)
			throw Error(fmt::format("'{}' is {} {} in the checkpoint but {} {} here", target.variable,
						dtype_name(p.dtype), shape_text(p.whole), dtype_name(target.dtype),
						shape_text(target.whole)));
		const int64_t stop = std::min(end, p.offset + p.count);
		const Tensor bytes = read(p);
		std::memcpy(out + (at - target.offset) * element,
			    static_cast<const std::byte*>(bytes.data()) + (at - p.offset) * element,
			    static_cast<size_t>(stop - at) * element);
		at = stop;
	}
	destination.copy_from(host);
}

} // namespace tower
