// The hierarchical all-reduce's direct path: ranks whose buffers live in the node's shared window
// reduce straight from each other's buffers, with no staging copies.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms/all_reduce_hierarchical.h"
#include "collectives/algorithms/reduce_host.h"
#include "collectives/segments.h"
#include "base/error.h"

namespace tower {

namespace {

// The block each reduction pass covers: its inputs and its result stay in the core's L2 while
// the result is copied into the peers' buffers. Larger blocks measured no faster.
constexpr size_t direct_block_bytes = size_t{64} << 10;

// Mailbox words: where this rank's send and receive buffers are. A window word of 0 means the
// buffer is not in any window of ours; otherwise it is the window's index + 1.
enum MailboxWord { send_window, send_offset, recv_window, recv_offset };

} // namespace

void* HierarchicalAllReduce::allocate(size_t bytes)
{
	windows_.push_back(std::make_unique<SharedWindow>(shm_.comm(), bytes));
	return windows_.back()->mine();
}

void HierarchicalAllReduce::deallocate(void* pointer)
{
	const auto found = std::find_if(windows_.begin(), windows_.end(), [&](const auto& w) { return w->mine() == pointer; });
	TOWER_CHECK(found != windows_.end(), "deallocate({}) of memory this all-reduce did not allocate", pointer);
	windows_.erase(found); // collective: every rank frees its matching window now
}

void HierarchicalAllReduce::publish(const void* send, const void* recv, size_t bytes)
{
	uint64_t* box = shm_.mailbox(shm_.rank());
	auto locate = [&](const void* p, MailboxWord window, MailboxWord offset) {
		box[window] = 0;
		for (size_t k = 0; k < windows_.size(); ++k)
			if (windows_[k]->holds(p, bytes)) {
				box[window] = k + 1;
				box[offset] = static_cast<uint64_t>(static_cast<const char*>(p) - windows_[k]->mine());
				return;
			}
	};
	locate(send, send_window, send_offset);
	locate(recv, recv_window, recv_offset);
}

std::optional<HierarchicalAllReduce::PeerBuffers> HierarchicalAllReduce::registered_peers() const
{
	PeerBuffers peers;
	for (int r = 0; r < shm_.size(); ++r) {
		const uint64_t* box = shm_.mailbox(r);
		if (box[send_window] == 0 || box[recv_window] == 0)
			return std::nullopt;
		// Window k is the same collective allocation on every rank, so rank r's part of it is
		// known here; its offset came through the mailbox.
		peers.send.push_back(windows_.at(box[send_window] - 1)->base(r) + box[send_offset]);
		peers.recv.push_back(windows_.at(box[recv_window] - 1)->base(r) + box[recv_offset]);
	}
	return peers;
}

void HierarchicalAllReduce::reduce_own_shard(const std::vector<const char*>& sources, char* out, Segment shard,
					     DType dtype, ReduceOp op, const std::function<void(size_t, size_t)>& done)
{
	const size_t esize = dtype_size(dtype), local = sources.size();
	const bool across = cross_.group_size() > 1;
	// Across nodes the whole shard is reduced first, since the ring moves it in one piece.
	const size_t block = across ? std::max<size_t>(shard.length, 1)
				    : std::max<size_t>(std::min(round_bytes_, direct_block_bytes) / esize, 1);
	std::vector<const void*> inputs(local);
	for (size_t first = shard.start; first < shard.start + shard.length; first += block) {
		const size_t length = std::min(block, shard.start + shard.length - first);
		for (size_t k = 0; k < local; ++k)
			inputs[k] = sources[k] + first * esize;
		reduce_host(out + first * esize, inputs.data(), local, length, dtype, op);
		if (across)
			continue;
		if (op == ReduceOp::mean)
			divide_host(out + first * esize, length, dtype, group_size());
		done(first, length);
	}
	if (across) {
		char* part = out + shard.start * esize;
		cross_.run(part, part, shard.length, dtype, op == ReduceOp::mean ? ReduceOp::sum : op);
		if (op == ReduceOp::mean)
			divide_host(part, shard.length, dtype, group_size());
		done(shard.start, shard.length);
	}
}

void HierarchicalAllReduce::run_direct(const PeerBuffers& peers, size_t count, DType dtype, ReduceOp op)
{
	const size_t esize = dtype_size(dtype), local = static_cast<size_t>(shm_.size());
	const int me = shm_.rank();
	const Segment mine = segment_of(count, local, static_cast<size_t>(me));
	// Only this rank reads shard `me` of any send buffer and writes shard `me` of any receive
	// buffer, so no two ranks touch the same bytes between the two barriers, in place or not.
	// Its own send buffer comes first: in place, the result overwrites exactly that input.
	std::vector<const char*> sources = {peers.send[static_cast<size_t>(me)]};
	for (size_t r = 0; r < local; ++r)
		if (r != static_cast<size_t>(me))
			sources.push_back(peers.send[r]);
	char* out = peers.recv[static_cast<size_t>(me)];
	reduce_own_shard(sources, out, mine, dtype, op, [&](size_t first, size_t length) {
		for (size_t r = 0; r < local; ++r)
			if (r != static_cast<size_t>(me))
				std::memcpy(peers.recv[r] + first * esize, out + first * esize, length * esize);
	});
	// Results ready: every rank's receive buffer is complete once all have spread their shard.
	shm_.barrier("hierarchical all-reduce (node barrier)");
}

} // namespace tower
