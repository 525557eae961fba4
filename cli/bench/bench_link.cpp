// The link between two hosts as a plain TCP stream (no MPI in the path): one way, and both ways
// at once, the bound a cross-host all-reduce is held against, as the memory-copy rate is on one host.
#include "cli/bench/bench.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/mpi/mpi_check.h"

namespace tower::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Closes the socket it holds.
struct Socket {
	int fd = -1;
	explicit Socket(int f = -1) : fd(f) {}
	Socket(Socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
	Socket& operator=(Socket&& o) noexcept
	{
		std::swap(fd, o.fd);
		return *this;
	}
	~Socket()
	{
		if (fd >= 0)
			::close(fd);
	}
};

std::string system_error(const char* what)
{
	return fmt::format("{}: {}", what, std::strerror(errno));
}

bool send_all(int fd, const char* data, size_t bytes)
{
	while (bytes > 0) {
		const ssize_t n = ::send(fd, data, std::min<size_t>(bytes, size_t{1} << 20), MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		data += n;
		bytes -= static_cast<size_t>(n);
	}
	return true;
}

bool receive_all(int fd, char* data, size_t bytes)
{
	while (bytes > 0) {
		const ssize_t n = ::recv(fd, data, std::min<size_t>(bytes, size_t{1} << 20), 0);
		if (n <= 0)
			return false;
		data += n;
		bytes -= static_cast<size_t>(n);
	}
	return true;
}

// The listening side: a socket on any address of this host, and the port it got.
std::string listen_any(Socket* listener, int* port)
{
	*listener = Socket(::socket(AF_INET, SOCK_STREAM, 0));
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	socklen_t length = sizeof a;
	if (listener->fd < 0 || ::bind(listener->fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
	    ::listen(listener->fd, 1) != 0 || ::getsockname(listener->fd, reinterpret_cast<sockaddr*>(&a), &length) != 0)
		return system_error("listen");
	*port = ntohs(a.sin_port);
	return {};
}

// Waits up to 10 s for `fd` to become ready for `events`: a host that does not answer is an
// error, not a hang.
bool ready_within(int fd, short events)
{
	pollfd p{fd, events, 0};
	return ::poll(&p, 1, 10000) == 1 && (p.revents & events);
}

std::string connect_to(const std::string& host, int port, Socket* out)
{
	addrinfo hints{}, *found = nullptr;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
		return fmt::format("resolve {}: {}", host, ::gai_strerror(e));
	*out = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	const int r = ::connect(out->fd, found->ai_addr, found->ai_addrlen);
	::freeaddrinfo(found);
	int error = 0;
	socklen_t length = sizeof error;
	if (r != 0 && errno != EINPROGRESS)
		return fmt::format("connect to {}:{}: {}", host, port, std::strerror(errno));
	if (!ready_within(out->fd, POLLOUT))
		return fmt::format("connect to {}:{}: no answer within 10 s", host, port);
	if (::getsockopt(out->fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0)
		return fmt::format("connect to {}:{}: {}", host, port, std::strerror(error));
	::fcntl(out->fd, F_SETFL, 0);
	return {};
}

// Seconds for `bytes` one way (the receiver answers with one byte), or both ways at once.
double one_way(int fd, bool sender, std::vector<char>& buffer, size_t bytes)
{
	const auto start = Clock::now();
	char ack = 0;
	const bool ok = sender ? send_all(fd, buffer.data(), bytes) && receive_all(fd, &ack, 1)
			       : receive_all(fd, buffer.data(), bytes) && send_all(fd, &ack, 1);
	return ok ? std::chrono::duration<double>(Clock::now() - start).count() : -1;
}

double both_ways(int fd, std::vector<char>& out, std::vector<char>& in, size_t bytes)
{
	const auto start = Clock::now();
	bool sent = false;
	std::thread sender([&] { sent = send_all(fd, out.data(), bytes); });
	const bool received = receive_all(fd, in.data(), bytes);
	sender.join();
	return sent && received ? std::chrono::duration<double>(Clock::now() - start).count() : -1;
}

// The first ranks of node 0 and of node 1, as world ranks.
std::array<int, 2> node_leaders(const Topology& topology)
{
	std::vector<std::array<int, 2>> where(static_cast<size_t>(topology.size()));
	const std::array<int, 2> mine{topology.node(), topology.local_rank()};
	TOWER_MPI(MPI_Allgather(mine.data(), 2, MPI_INT, where.data(), 2, MPI_INT, topology.world()));
	std::array<int, 2> leaders{-1, -1};
	for (int r = 0; r < topology.size(); ++r)
		for (int node = 0; node < 2; ++node)
			if (where[static_cast<size_t>(r)] == std::array<int, 2>{node, 0})
				leaders[static_cast<size_t>(node)] = r;
	return leaders;
}

// On one of the two leaders: connects to the other (node 1's listens) and streams, filling
// `rate` (GB/s one way, both ways) or returning why it could not.
std::string stream_between(const Topology& topology, int peer, bool listener_side, size_t bytes, int iters,
			   double rate[2])
{
	const MPI_Comm world = topology.world();
	std::string why;
	Socket listener, connection;
	int port = 0;
	char host[256] = {};
	if (listener_side) {
		why = listen_any(&listener, &port);
		::gethostname(host, sizeof host - 1);
		TOWER_MPI(MPI_Send(&port, 1, MPI_INT, peer, 0, world));
		TOWER_MPI(MPI_Send(host, sizeof host, MPI_CHAR, peer, 0, world));
		if (why.empty() && ready_within(listener.fd, POLLIN))
			connection = Socket(::accept(listener.fd, nullptr, nullptr));
		else if (why.empty())
			why = "no connection from the first host within 10 s";
	} else {
		TOWER_MPI(MPI_Recv(&port, 1, MPI_INT, peer, 0, world, MPI_STATUS_IGNORE));
		TOWER_MPI(MPI_Recv(host, sizeof host, MPI_CHAR, peer, 0, world, MPI_STATUS_IGNORE));
		why = port > 0 ? connect_to(host, port, &connection) : "the second host could not listen";
	}
	// A peer that stops reading or writing ends the measurement, not the bench.
	const timeval limit{30, 0};
	if (why.empty() && (::setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0 ||
			    ::setsockopt(connection.fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) != 0))
		why = system_error("setsockopt");
	std::vector<char> out(bytes, 1), in(bytes);
	double best_one = 1e30, best_both = 1e30;
	for (int i = 0; why.empty() && i < std::max(iters, 1); ++i) {
		const double t1 = one_way(connection.fd, !listener_side, out, bytes);
		const double t2 = both_ways(connection.fd, out, in, bytes);
		if (t1 < 0 || t2 < 0)
			why = "the connection broke";
		best_one = std::min(best_one, t1);
		best_both = std::min(best_both, t2);
	}
	if (why.empty())
		rate[0] = static_cast<double>(bytes) / best_one / 1e9, rate[1] = static_cast<double>(bytes) / best_both / 1e9;
	return why;
}

} // namespace

std::optional<LinkRate> measure_link_rate(const Topology& topology, size_t bytes, int iters)
{
	if (topology.node_count() < 2 || topology.simulated())
		return std::nullopt;
	const auto [a, b] = node_leaders(topology);
	double result[2] = {0, 0};
	char problem[256] = {};
	if (topology.rank() == a || topology.rank() == b) {
		const std::string why = stream_between(topology, topology.rank() == b ? a : b, topology.rank() == b, bytes,
						       iters, result);
		std::snprintf(problem, sizeof problem, "%s", why.c_str());
	}
	// The connecting side's figures and verdict, to every rank.
	TOWER_MPI(MPI_Bcast(result, 2, MPI_DOUBLE, a, topology.world()));
	TOWER_MPI(MPI_Bcast(problem, sizeof problem, MPI_CHAR, a, topology.world()));
	LinkRate rate;
	rate.one_way_gbps = result[0];
	rate.both_ways_gbps = result[1];
	rate.problem = problem;
	return rate;
}

std::string describe_link_rate(const LinkRate& rate, size_t bytes)
{
	if (!rate.problem.empty())
		return fmt::format("# link between node 0 and node 1: not measured ({})", rate.problem);
	return fmt::format("# link between node 0 and node 1, a TCP stream of {} bytes (best of the rounds): one way "
			   "{:.3f} GB/s, both ways at once {:.3f} GB/s each way; a ring all-reduce's busbw across "
			   "them is at most the latter",
			   bytes, rate.one_way_gbps, rate.both_ways_gbps);
}

} // namespace tower::cli
