// Entry point of test binaries that need a GPU on every rank; they skip (77) without one.
#include "test/harness/mpi_main.h"

int main(int argc, char** argv)
{
	return tower::test::run_tests(argc, argv, true);
}
