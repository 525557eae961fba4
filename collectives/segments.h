// Splitting `count` elements into n nearly equal contiguous segments, the first count % n one longer.
#pragma once

#include <cstddef>

namespace tower {

struct Segment {
	size_t start = 0;
	size_t length = 0;
};

inline Segment segment_of(size_t count, size_t parts, size_t index)
{
	const size_t base = count / parts, extra = count % parts;
	return {index * base + (index < extra ? index : extra), base + (index < extra ? 1 : 0)};
}

} // namespace tower
