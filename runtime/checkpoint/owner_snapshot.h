// The async and sync-replicas owners' own checkpoints: the state of one owner's snapshot in
// progress (runtime/checkpoint/owner_snapshot.cpp).
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"

namespace tower {

struct Checkpointer::Snapshot {
	std::thread writer;
	std::string problem;
	std::atomic<bool> done{false};    // the writer has finished (problem is set)
	std::atomic<bool> abandon{false}; // rank 0 stops waiting for the other owners' word
};

} // namespace tower
