// The memory ledger: live bytes and a high-water mark that does not fall when memory is freed.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "base/tensor/memory_ledger.h"

using tower::MemoryLedger;

TEST_CASE("memory ledger: the peak is a high-water mark")
{
	MemoryLedger l;
	int a = 0, b = 0, c = 0;
	l.allocated(&a, 100);
	l.allocated(&b, 50);
	CHECK(l.live() == 150);
	l.freed(&a);
	l.allocated(&c, 20);
	CHECK(l.live() == 70);
	CHECK(l.peak() == 150); // what "in use at this moment" would have said: 70
	l.freed(&c);
	l.freed(&c);       // twice: no change
	l.freed(nullptr);  // unknown: no change
	CHECK(l.live() == 50);
	l.observe(120);    // a sample below the peak changes nothing
	CHECK(l.peak() == 150);
	l.observe(400);    // the whole device's use, sampled higher
	CHECK(l.peak() == 400);
}

TEST_CASE("memory ledger: allocations from several threads")
{
	MemoryLedger l;
	std::vector<int> cells(4000);
	std::vector<std::thread> threads;
	for (int t = 0; t < 4; ++t)
		threads.emplace_back([&, t] {
			for (int i = 0; i < 1000; ++i)
				l.allocated(&cells[static_cast<size_t>(t * 1000 + i)], 8);
			for (int i = 0; i < 1000; ++i)
				l.freed(&cells[static_cast<size_t>(t * 1000 + i)]);
		});
	for (auto& th : threads)
		th.join();
	CHECK(l.live() == 0);
	CHECK(l.peak() >= 8000);
	CHECK(l.peak() <= 32000);
}
