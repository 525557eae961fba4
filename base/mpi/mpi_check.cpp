// Checks the return codes of MPI calls and turns failures into tower::Error.
#include "base/mpi/mpi_check.h"

#include <mpi.h>

#include "base/error.h"

namespace tower {

void mpi_check(int rc, std::string_view call)
{
	if (rc == MPI_SUCCESS)
		return;
	char text[MPI_MAX_ERROR_STRING];
	int length = 0;
	MPI_Error_string(rc, text, &length);
	throw Error(fmt::format("{} failed: {}", call, std::string_view(text, static_cast<size_t>(length))));
}

} // namespace tower
