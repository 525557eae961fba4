// The GPU half of copy_batch in a build without CUDA: there is none.
#include "collectives/fusion/pack.h"

#include "base/error.h"

namespace tower {

void copy_batch_device(const std::vector<CopyTask>&, const Device& device)
{
	throw Error(fmt::format("packing buckets on {} needs a CUDA build; rebuild with -Dcuda=enabled", device.name()));
}

} // namespace tower
