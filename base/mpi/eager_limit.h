// What the MPI library sends across hosts without a handshake, read through MPI's tool interface.
#pragma once

#include <cstddef>
#include <optional>

#include <mpi.h>

namespace tower {

// The payload a point-to-point message across hosts may carry and still go eagerly (sent whole,
// without the receiver's go-ahead) on Open MPI's TCP transport: its `btl_tcp_eager_limit` less
// room for the headers it counts. A larger message first waits for a reply from the receiver,
// and that reply queues behind the receiver's own outgoing data on the same connection. Empty
// where the library has no such setting (another MPI). Open MPI registers the setting whether or
// not its TCP transport carries the job (over UCX or InfiniBand it does not, and the cut buys
// nothing there: a limit above the chunk size, `--mca btl_tcp_eager_limit`, turns it off). Read
// once per process; call after MPI_Init.
std::optional<size_t> tcp_eager_payload_bytes();

} // namespace tower
