// The lines an elastic launcher reads of a run.
#include "runtime/observe/launcher_lines.h"

#include <cstdio>
#include <cstdlib>

namespace tower {

bool under_elastic_launcher()
{
	return std::getenv("TOWER_ELASTIC_GENERATION") != nullptr;
}

void LauncherLines::started(int64_t step, bool resumed)
{
	if (resumed)
		line("resumed", step);
	else
		line("started", -1);
}

void LauncherLines::stepped(int64_t step)
{
	line("step", step);
}

// One write and a flush per line: the launcher reads them as they come.
void LauncherLines::line(const char* what, int64_t step) const
{
	if (!enabled_)
		return;
	if (step >= 0)
		std::fprintf(stdout, "%s%s %lld\n", launcher_line_prefix, what, static_cast<long long>(step));
	else
		std::fprintf(stdout, "%s%s\n", launcher_line_prefix, what);
	std::fflush(stdout);
}

} // namespace tower
