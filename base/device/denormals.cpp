// Denormal floats flushed to zero on the CPU: a tiny value costs an x86 core up to a hundred times
// an ordinary one in every multiply that touches it.
#include "base/device/denormals.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace tower {

void flush_denormals_on_this_thread()
{
#if defined(__x86_64__) || defined(__i386__)
	constexpr unsigned flush_to_zero = 0x8000, denormals_are_zero = 0x0040;
	_mm_setcsr(_mm_getcsr() | flush_to_zero | denormals_are_zero);
#endif
}

} // namespace tower
