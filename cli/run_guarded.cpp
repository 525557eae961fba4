// Runs a command inside an MPI world and turns escaping errors into one clear exit path.
#include "cli/run_guarded.h"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "base/error.h"
#include "base/fatal.h"
#include "cli/train/field_options.h"

namespace tower::cli {

int run_guarded(int* argc, char*** argv, const std::function<int(World&)>& body)
{
	std::unique_ptr<World> world;
	try {
		world = std::make_unique<World>(argc, argv);
	} catch (const std::exception& e) {
		std::fprintf(stderr, "error: %s\n", e.what());
		return 1;
	}
	try {
		return body(*world);
	} catch (const AgreedError& e) {
		std::fprintf(stderr, "[rank %d] error: %s\n", world->rank(), in_flags(e.what()).c_str());
		std::fflush(stderr);
		return 2;
	} catch (const std::exception& e) {
		fatal(fmt::format("error: {}", in_flags(e.what())));
	}
}

} // namespace tower::cli
