// Open MPI's TCP eager limit, read through MPI_T.
#include "base/mpi/eager_limit.h"

#include <cstdint>

#include "base/mpi/mpi_check.h"

namespace tower {

namespace {

// Room for the transport's and the matching layer's headers, which Open MPI counts inside the
// eager limit. They take a few dozen bytes, but a payload within 256 bytes of the limit ran the
// ring 30% slower across the unshaped veth than one 512 bytes short of it (both eager).
constexpr size_t header_room = 512;

std::optional<uint64_t> read_integer_cvar(const char* name)
{
	int index = 0;
	if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS)
		return std::nullopt;
	MPI_Datatype type = MPI_DATATYPE_NULL;
	int verbosity = 0, bind = 0, scope = 0, name_length = 0, description_length = 0;
	MPI_T_enum enumtype{};
	if (MPI_T_cvar_get_info(index, nullptr, &name_length, &verbosity, &type, &enumtype, nullptr,
				&description_length, &bind, &scope) != MPI_SUCCESS)
		return std::nullopt;
	MPI_T_cvar_handle handle{};
	int count = 0;
	if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS)
		return std::nullopt;
	std::optional<uint64_t> value;
	if (count == 1) {
		if (type == MPI_INT || type == MPI_UNSIGNED) {
			int v = 0;
			if (MPI_T_cvar_read(handle, &v) == MPI_SUCCESS && v > 0)
				value = static_cast<uint64_t>(v);
		} else if (type == MPI_UNSIGNED_LONG || type == MPI_UNSIGNED_LONG_LONG || type == MPI_COUNT) {
			unsigned long long v = 0;
			if (MPI_T_cvar_read(handle, &v) == MPI_SUCCESS)
				value = static_cast<uint64_t>(v);
		}
	}
	MPI_T_cvar_handle_free(&handle);
	return value;
}

std::optional<uint64_t> read_eager_limit()
{
	// Open MPI's first MPI_T_init_thread records the level it is given as the process's thread
	// level: ask for the one MPI_Init gave, or a run with a communication thread would be told
	// it has none.
	int level = MPI_THREAD_SINGLE, provided = 0;
	TOWER_MPI(MPI_Query_thread(&level));
	if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS)
		return std::nullopt;
	const std::optional<uint64_t> limit = read_integer_cvar("btl_tcp_eager_limit");
	MPI_T_finalize();
	return limit;
}

} // namespace

std::optional<size_t> tcp_eager_payload_bytes()
{
	// Read once per process: a setting cannot change after MPI_Init, and the tool interface
	// registers every component again each time it starts.
	static const std::optional<uint64_t> limit = read_eager_limit();
	if (!limit || *limit <= 2 * header_room)
		return std::nullopt;
	return static_cast<size_t>(*limit) - header_room;
}

} // namespace tower
