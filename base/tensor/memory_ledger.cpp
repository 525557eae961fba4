// What one device holds of tower's own allocations: the bytes live now and their high-water mark.
#include "base/tensor/memory_ledger.h"

#include <algorithm>

namespace tower {

void MemoryLedger::allocated(const void* pointer, size_t bytes)
{
	if (pointer == nullptr)
		return;
	const std::lock_guard lock(mutex_);
	sizes_[pointer] = bytes;
	live_ += bytes;
	peak_ = std::max(peak_, live_);
}

void MemoryLedger::freed(const void* pointer)
{
	const std::lock_guard lock(mutex_);
	const auto it = sizes_.find(pointer);
	if (it == sizes_.end())
		return;
	live_ -= it->second;
	sizes_.erase(it);
}

size_t MemoryLedger::live() const
{
	const std::lock_guard lock(mutex_);
	return live_;
}

size_t MemoryLedger::peak() const
{
	const std::lock_guard lock(mutex_);
	return peak_;
}

void MemoryLedger::observe(size_t bytes)
{
	const std::lock_guard lock(mutex_);
	peak_ = std::max(peak_, bytes);
}

} // namespace tower
