// A libtorch program trained data-parallel through tower: a small network fits a curve, each rank on
// samples of its own, torch's Adam applying the gradients tower reduced while backward ran (or,
// under parameter-server, async and sync-replicas, the owners applying torch's Adam rule).
//   make && mpirun -np 2 ./fit [STEPS [STRATEGY]]   (PKG_CONFIG_PATH=<prefix>/lib/.../pkgconfig if needed)
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/tensor_collectives.h"

namespace ta = tower::torch_adapter;

int main(int argc, char** argv)
{
	const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
	const char* strategy = argc > 2 ? argv[2] : "replicated";
	try {
		ta::init();
		const int rank = ta::topology().rank(), size = ta::topology().size();
		torch::set_num_threads(1);
		torch::manual_seed(0);
		torch::nn::Sequential net(torch::nn::Linear(1, 32), torch::nn::Tanh(), torch::nn::Linear(32, 32),
					  torch::nn::Tanh(), torch::nn::Linear(32, 1));
		torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-2));
		ta::ReducerOptions options;
		options.name = "fit";
		options.strategy.name = strategy;
		options.strategy.replicated.fusion_mb = 0.004; // several buckets even for this small net
		// async and sync-replicas: the chief hands out the tokens of `steps` steps and says when
		// the run is over (opt.more()).
		const bool detached = options.strategy.name == "async" || options.strategy.name == "sync-replicas";
		if (detached)
			options.steps = steps;
		ta::DistributedOptimizer opt(adam, ta::named_parameters_of(*net), options);

		torch::manual_seed(100 + rank); // every rank draws samples of its own
		torch::Tensor loss;
		for (int step = 1; detached ? opt.more() : step <= steps; ++step) {
			const torch::Tensor x = torch::rand({64, 1}) * 6.0 - 3.0;
			const torch::Tensor y = torch::sin(x) * 0.5 + 0.1 * x;
			opt.zero_grad();
			loss = torch::mse_loss(net->forward(x), y);
			loss.backward();
			opt.step();
		}
		// The mean of the ranks' last losses, and how far the replicas drifted apart (0: not at all).
		const double mean = ta::allreduce(loss.detach(), tower::ReduceOp::mean, "loss").item<double>();
		torch::Tensor flat = torch::cat({net->parameters()[0].detach().flatten(), net->parameters()[4].detach().flatten()});
		const double spread = (ta::allreduce(flat, tower::ReduceOp::max, "max") -
				       ta::allreduce(flat, tower::ReduceOp::min, "min")).abs().max().item<double>();
		const double first_layer = net->parameters()[0].detach().abs().sum().item<double>();
		if (rank == 0)
			std::printf("fit: %s, %d steps on %d rank(s), %zu bucket(s): loss %.5f, replicas differ by %g, "
				    "first layer's |w| sum %.9g\n",
				    strategy, steps, size, opt.last().buckets, mean, spread, first_layer);
		ta::shutdown();
		return mean < 0.01 && spread == 0 ? 0 : 1;
	} catch (const tower::AgreedError& e) {
		std::fprintf(stderr, "fit: %s\n", e.what());
		return 2;
	}
}
