// Learning-rate schedule tests: values at the boundaries of each schedule, and bad settings.
#include <cmath>
#include <numbers>
#include <string>

#include <doctest/doctest.h>

#include "optim/schedule.h"
#include "base/error.h"
#include "test/harness/mpi_main.h"

using namespace tower;

namespace {

ScheduleConfig named(const std::string& name)
{
	ScheduleConfig c;
	c.name = name;
	c.base_lr = 0.4f;
	return c;
}

} // namespace

TEST_CASE("the constant schedule never changes")
{
	const LrSchedule s = make_schedule(named("constant"));
	for (int64_t step : {0, 1, 999, 1000000})
		CHECK(s.lr(step) == 0.4f);
}

TEST_CASE("the step schedule multiplies by gamma every step_size steps")
{
	ScheduleConfig c = named("step");
	c.step_size = 10;
	c.gamma = 0.5f;
	const LrSchedule s = make_schedule(c);
	CHECK(s.lr(0) == doctest::Approx(0.4));
	CHECK(s.lr(9) == doctest::Approx(0.4));
	CHECK(s.lr(10) == doctest::Approx(0.2));
	CHECK(s.lr(19) == doctest::Approx(0.2));
	CHECK(s.lr(20) == doctest::Approx(0.1));
	CHECK(s.lr(35) == doctest::Approx(0.05));
}

TEST_CASE("warm-up rises linearly, then a cosine falls to min_lr at total_steps and stays")
{
	ScheduleConfig c = named("warmup_cosine");
	c.warmup_steps = 4;
	c.total_steps = 14;
	c.min_lr = 0.1f;
	const LrSchedule s = make_schedule(c);
	CHECK(s.lr(0) == doctest::Approx(0.1));
	CHECK(s.lr(1) == doctest::Approx(0.2));
	CHECK(s.lr(3) == doctest::Approx(0.4));
	CHECK(s.lr(4) == doctest::Approx(0.4));
	CHECK(s.lr(9) == doctest::Approx(0.25)); // half way: the mean of base and min
	const double quarter = 0.1 + 0.3 * 0.5 * (1 + std::cos(std::numbers::pi * 0.2));
	CHECK(s.lr(6) == doctest::Approx(quarter));
	CHECK(s.lr(14) == doctest::Approx(0.1));
	CHECK(s.lr(100) == doctest::Approx(0.1));
	for (int64_t step = 4; step < 14; ++step)
		CHECK(s.lr(step + 1) < s.lr(step));
}

TEST_CASE("warmup_cosine without warm-up starts at base_lr")
{
	ScheduleConfig c = named("warmup_cosine");
	c.total_steps = 10;
	const LrSchedule s = make_schedule(c);
	CHECK(s.lr(0) == doctest::Approx(0.4));
	CHECK(s.lr(10) == doctest::Approx(0.0));
}

TEST_CASE("an unknown schedule is an agreed error listing the valid names")
{
	CHECK_THROWS_WITH_AS(make_schedule(named("linear")),
			     "unknown learning-rate schedule 'linear'; valid schedules: constant, step, warmup_cosine",
			     AgreedError);
}

TEST_CASE("inconsistent schedule settings are agreed errors")
{
	ScheduleConfig c = named("warmup_cosine");
	c.warmup_steps = 10;
	c.total_steps = 10;
	CHECK_THROWS_AS(make_schedule(c), AgreedError);
	c = named("step");
	c.step_size = 0;
	CHECK_THROWS_AS(make_schedule(c), AgreedError);
	c = named("constant");
	c.base_lr = 0.0f;
	CHECK_THROWS_AS(make_schedule(c), AgreedError);
}
