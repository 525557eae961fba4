// The all-reduce interface: the modes' names and the memory an all-reduce hands out
// (collectives/algorithms/make_all_reduce.cpp builds the algorithms).
#include "collectives/all_reduce.h"

#include <algorithm>

#include "base/error.h"
#include "base/tensor/memory_host.h"

namespace tower {

std::string_view all_reduce_mode_name(AllReduceMode mode)
{
	switch (mode) {
	case AllReduceMode::ring: return "ring";
	case AllReduceMode::hierarchical: return "hierarchical";
	case AllReduceMode::naive: return "naive";
	}
	return "unknown";
}

AllReduce::~AllReduce()
{
	for (void* p : host_buffers_)
		host_free(p);
}

void* AllReduce::allocate(size_t bytes)
{
	void* p = host_alloc(std::max<size_t>(bytes, 1));
	host_buffers_.push_back(p);
	return p;
}

void AllReduce::deallocate(void* pointer)
{
	const auto found = std::find(host_buffers_.begin(), host_buffers_.end(), pointer);
	TOWER_CHECK(found != host_buffers_.end(), "deallocate({}) of memory this all-reduce did not allocate", pointer);
	host_free(pointer);
	host_buffers_.erase(found);
}

} // namespace tower
