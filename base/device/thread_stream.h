// The CUDA stream of the calling host thread's GPU work, in a header that CUDA kernel files can include.
#pragma once

namespace tower {

// The CUDA stream that tower's kernels, cuBLAS calls, copies and fills go to from this host thread:
// CUDA's legacy default stream, unless the thread adopted a SideStream (base/device/stream.h).
// Opaque (a cudaStream_t), so that code without CUDA's headers can hold it; nullptr in a build
// without CUDA.
void* thread_stream();

} // namespace tower
