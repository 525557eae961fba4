// Denormal floats flushed to zero on the CPU: a tiny value costs an x86 core up to a hundred times
// an ordinary one in every multiply that touches it.
#pragma once

namespace tower {

// Sets flush-to-zero and denormals-are-zero (MXCSR) on the calling thread, which threads it starts
// afterwards inherit: values below 1.2e-38 in f32 become 0. Call it first thing in a process that
// computes on the CPU (tower's executable does). Under local-sgd's DiLoCo outer step the GPT's
// attention reached such values and its step slowed 4x; the loss did not move in the 4th digit.
// Does nothing on other processors.
void flush_denormals_on_this_thread();

} // namespace tower
