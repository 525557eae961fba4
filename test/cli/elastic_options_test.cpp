// tower elastic's parts that need no job: its options, what mpirun's lines say, and the hostfile.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "cli/elastic/elastic_hosts.h"
#include "cli/elastic/elastic_job.h"
#include "cli/elastic/elastic_options.h"

using namespace tower;
using namespace tower::cli;

TEST_CASE("elastic options: its own, mpirun's in order, and the train command's")
{
	const ElasticOptions o = parse_elastic_options({"-np", "3", "--min-np", "2", "--oversubscribe", "--mca", "btl",
							"tcp,self", "--max-restarts", "5", "--", "train", "--checkpoint-dir",
							"ckpt", "--strategy", "parameter-server", "--ps-ranks", "1"});
	CHECK(o.np == 3);
	CHECK(o.min_np == 2);
	CHECK(o.max_restarts == 5);
	CHECK(o.mpirun_args == std::vector<std::string>{"--oversubscribe", "--mca", "btl", "tcp,self"});
	CHECK(o.command.front() == "train");
	CHECK(o.checkpoint_dir == "ckpt");
	CHECK(o.ps_ranks == 1);
	CHECK(smallest_size(o) == 2);
	CHECK(option_value({"--checkpoint-dir=x"}, "--checkpoint-dir") == "x");
	// A program of its own: the launcher's --checkpoint-dir, the command as it is.
	const ElasticOptions p = parse_elastic_options({"-np", "2", "--checkpoint-dir", "ck", "--", "/usr/bin/python3",
							"train.py", "--epochs", "2"});
	CHECK(p.program);
	CHECK(p.checkpoint_dir == "ck");
	CHECK(p.command == std::vector<std::string>{"/usr/bin/python3", "train.py", "--epochs", "2"});
	// A relaunch drops the command's own --resume, which would go back to the first start.
	CHECK(without_resume({"train", "--resume", "old/step-0000000100", "--epochs", "2"}) ==
	      std::vector<std::string>{"train", "--epochs", "2"});
	CHECK(without_resume({"train", "--resume", "--epochs", "2"}) == std::vector<std::string>{"train", "--epochs", "2"});
	CHECK(without_resume({"train", "--resume=old", "--lr", "0.1"}) == std::vector<std::string>{"train", "--lr", "0.1"});
}

TEST_CASE("elastic options: what is wrong is named")
{
	auto problem = [](const std::vector<std::string>& args) {
		try {
			parse_elastic_options(args);
		} catch (const Error& e) {
			return std::string(e.what());
		}
		return std::string();
	};
	CHECK(problem({"--", "train", "--checkpoint-dir", "c"}).find("give -np N") != std::string::npos);
	CHECK(problem({"-np", "2", "--", "train"}).find("no --checkpoint-dir") != std::string::npos);
	CHECK(problem({"-np", "2", "--", "/usr/bin/python3", "t.py"}).find("'/usr/bin/python3' is not tower train, so give "
									     "its checkpoint directory") != std::string::npos);
	CHECK(problem({"-np", "2", "--checkpoint-dir", "c", "--", "train", "--checkpoint-dir", "c"})
		      .find("is a program's") != std::string::npos);
	CHECK(problem({"-np", "2", "--min-np", "3", "--", "train", "--checkpoint-dir", "c"}).find("--min-np 3") !=
	      std::string::npos);
	CHECK(problem({"-np", "two", "--", "train", "--checkpoint-dir", "c"}).find("whole number") != std::string::npos);
	CHECK(problem({"-np", "2", "--host", "a,b", "--", "train", "--checkpoint-dir", "c"}).find("--hostfile") !=
	      std::string::npos);
	CHECK(problem({"-np", "1", "--", "train", "--checkpoint-dir", "c", "--ps-ranks", "1"}).find("at least 2") !=
	      std::string::npos);
	CHECK(problem({"-np", "2", "--", "train", "--checkpoint-dir", "c", "--groups", "0;1"}).find("--groups") !=
	      std::string::npos);
}

TEST_CASE("elastic: mpirun's and tower's lines say what ended a generation")
{
	GenerationOutcome o;
	CHECK(read_generation_line("tower-elastic: resumed 75", o));
	CHECK(read_generation_line("tower-elastic: step 76", o));
	CHECK(read_generation_line("[1,0]<stdout>:tower-elastic: step 77", o)); // --tag-output
	CHECK(o.start_step == 75);
	CHECK(o.last_step == 77);
	CHECK(o.first_step_at.has_value());
	CHECK_FALSE(read_generation_line("epoch 1/2  step 50/624  loss 0.5", o));
	CHECK(o.lost_ranks.empty());
	CHECK_FALSE(read_generation_line(
		"mpirun noticed that process rank 2 with PID 4242 on node host2 exited on signal 9 (Killed).", o));
	REQUIRE(o.lost_ranks.size() == 1);
	CHECK(o.lost_ranks[0].rank == 2);
	CHECK(o.lost_ranks[0].node == "host2");
	CHECK(o.lost_ranks[0].signal == 9);
	CHECK_FALSE(read_generation_line("  Remote daemon: [[5678,0],1] on node host1", o));
	CHECK(o.lost_hosts == std::vector<std::string>{"host1"});
	GenerationOutcome e;
	read_generation_line("[rank 1] error: --data x: no such directory", e);
	CHECK(e.first_error.find("no such directory") != std::string::npos);
}

TEST_CASE("elastic: hostfiles")
{
	const std::string path = "elastic_options_test.hostfile";
	{
		std::ofstream f(path);
		f << "# the cluster\nnodeA slots=2 max_slots=4\n\nnodeB\n";
	}
	const auto hosts = read_hostfile(path);
	REQUIRE(hosts.size() == 2);
	CHECK(hosts[0].host == "nodeA");
	CHECK(hosts[0].slots == 2);
	CHECK(hosts[1].slots == 1);
	CHECK(total_slots(hosts) == 3);
	{
		std::ofstream f(path);
		f << "nodeA slots=0\n";
	}
	CHECK_THROWS_AS(read_hostfile(path), Error);
	std::remove(path.c_str());
}
