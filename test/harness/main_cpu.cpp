// Entry point of test binaries that run on any machine.
#include "test/harness/mpi_main.h"

int main(int argc, char** argv)
{
	return tower::test::run_tests(argc, argv, false);
}
