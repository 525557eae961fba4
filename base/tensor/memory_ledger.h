// What one device holds of tower's own allocations: the bytes live now and their high-water mark.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace tower {

// Thread-safe (the communication thread allocates too). The CUDA backend keeps one per GPU, so
// the peak it reports is a real high-water mark, not the memory in use at the moment of asking.
class MemoryLedger {
public:
	void allocated(const void* pointer, size_t bytes);
	// A pointer the ledger does not know (null, or allocated elsewhere) changes nothing.
	void freed(const void* pointer);
	size_t live() const;
	size_t peak() const;
	// Raises the peak to `bytes` if it is higher: what a sample of the whole device's use found.
	void observe(size_t bytes);

private:
	mutable std::mutex mutex_;
	std::unordered_map<const void*, size_t> sizes_;
	size_t live_ = 0, peak_ = 0;
};

} // namespace tower
