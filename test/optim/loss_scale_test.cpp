// Tests of loss scaling: option parsing, both dynamic policies step by step, static and none, state.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "runtime/options/names.h"
#include "optim/loss_scale.h"
#include "base/error.h"

using namespace tower;

namespace {

int64_t clean_steps(LossScaler& s)
{
	return *s.state()[1].tensor.data_as<int64_t>();
}

} // namespace

TEST_CASE("loss-scale options parse every valid form and name them on a bad one")
{
	CHECK(parse_loss_scale("none").mode == LossScaleMode::none);
	const LossScaleOptions d = parse_loss_scale("dynamic");
	CHECK(d.mode == LossScaleMode::dynamic);
	CHECK(d.policy == LossScalePolicy::log2);
	CHECK(parse_loss_scale("dynamic:log2").policy == LossScalePolicy::log2);
	CHECK(parse_loss_scale("dynamic:growth").policy == LossScalePolicy::growth);
	const LossScaleOptions s = parse_loss_scale("static:128.5");
	CHECK(s.mode == LossScaleMode::fixed);
	CHECK(s.fixed_scale == 128.5f);
	LossScaleOptions tuned;
	tuned.log2_init = 10.0;
	CHECK(parse_loss_scale("dynamic", tuned).log2_init == 10.0);
	for (const char* bad : {"", "dynamic:fast", "static", "static:", "static:-4", "static:0", "static:1e99",
				"static:12x", "Dynamic"}) {
		CAPTURE(bad);
		CHECK_THROWS_WITH_AS(parse_loss_scale(bad), doctest::Contains("static:VALUE"), AgreedError);
	}
}

TEST_CASE("the log2 policy starts at 2^64, adds inc per clean step and drops dec on overflow")
{
	LossScaler s(parse_loss_scale("dynamic"));
	CHECK(s.log2_scale() == 64.0);
	CHECK(s.scale() == std::ldexp(1.0f, 64));
	// A scripted run: 'o' overflow, '.' clean. The state is an f32, so each step must move it to
	// exactly the f32 nearest to the previous value plus or minus one step: no more, no less.
	const std::string script = "oooo..o.......o..................o";
	int64_t clean = 0;
	for (char c : script) {
		const bool overflow = c == 'o';
		const double before = s.log2_scale();
		s.update(overflow);
		clean = overflow ? 0 : clean + 1;
		CHECK(s.log2_scale() == static_cast<float>(before + (overflow ? -1.0 : 0.0005)));
		CHECK(clean_steps(s) == clean);
	}
	// 7 overflows and 27 clean steps. Below 64 each f32 rounding is at most half an ulp, 2^-19;
	// 34 of them stay under 7e-5, well within half a clean step (2.5e-4) of the exact sum, so
	// one step too many or too few shows.
	CHECK(std::abs(s.log2_scale() - (64.0 - 7.0 + 27 * 0.0005)) < 0.00025);
}

TEST_CASE("the log2 policy takes init, inc and dec as options")
{
	LossScaleOptions o = parse_loss_scale("dynamic:log2");
	o.log2_init = 8.0;
	o.log2_inc = 0.25;
	o.log2_dec = 2.0;
	LossScaler s(o);
	CHECK(s.scale() == 256.0f);
	s.update(false);
	s.update(false);
	CHECK(s.log2_scale() == 8.5);
	s.update(true);
	CHECK(s.log2_scale() == 6.5);
}

TEST_CASE("the growth policy doubles after 2000 clean steps in a row and halves on overflow")
{
	LossScaler s(parse_loss_scale("dynamic:growth"));
	CHECK(s.scale() == 65536.0f);
	for (int i = 0; i < 1999; ++i)
		s.update(false);
	CHECK(s.scale() == 65536.0f);
	CHECK(clean_steps(s) == 1999);
	s.update(false); // the 2000th
	CHECK(s.scale() == 131072.0f);
	CHECK(clean_steps(s) == 0);
	for (int i = 0; i < 1500; ++i)
		s.update(false);
	s.update(true); // overflow resets the run of clean steps
	CHECK(s.scale() == 65536.0f);
	CHECK(clean_steps(s) == 0);
	for (int i = 0; i < 1999; ++i)
		s.update(false);
	CHECK(s.scale() == 65536.0f);
	s.update(true);
	s.update(true);
	CHECK(s.scale() == 16384.0f);
	LossScaleOptions fast = parse_loss_scale("dynamic:growth");
	fast.growth_interval = 3;
	LossScaler f(fast);
	// Scripted: two overflows, three clean (x2), two clean, overflow, three clean (x2).
	const std::string script = "oo.....o...";
	const float want[] = {32768, 16384, 16384, 16384, 32768, 32768, 32768, 16384, 16384, 16384, 32768};
	for (size_t i = 0; i < script.size(); ++i) {
		f.update(script[i] == 'o');
		CHECK(f.scale() == want[i]);
	}
}

TEST_CASE("static and none never change")
{
	// log2_scale() of a static scale: exact for powers of two, log2 of the value otherwise.
	CHECK(LossScaler(parse_loss_scale("static:128")).log2_scale() == 7.0);
	CHECK(LossScaler(parse_loss_scale("static:0.25")).log2_scale() == -2.0);
	// log2(1000) = 3 log2(10) = 3 x 3.32192809488736235 = 9.96578428466208705.
	CHECK(LossScaler(parse_loss_scale("static:1000")).log2_scale() == doctest::Approx(9.96578428466208705).epsilon(1e-15));
	LossScaler fixed(parse_loss_scale("static:1000"));
	LossScaler none(parse_loss_scale("none"));
	for (bool overflow : {true, false, true, false, false}) {
		fixed.update(overflow);
		none.update(overflow);
		CHECK(fixed.scale() == 1000.0f);
		CHECK(none.scale() == 1.0f);
		CHECK(none.log2_scale() == 0.0);
	}
	CHECK(clean_steps(fixed) == 0);
}

TEST_CASE("the state round-trips: writing it into another scaler restores the scale and the counter")
{
	LossScaleOptions o = parse_loss_scale("dynamic:growth");
	o.growth_interval = 4;
	LossScaler a(o);
	for (bool overflow : {true, false, false, false, false, false, false})
		a.update(overflow);
	CHECK(a.scale() == 65536.0f); // halved, then doubled after 4 clean steps, 2 clean since
	const std::vector<NamedTensor> sa = a.state();
	REQUIRE(sa.size() == 2);
	CHECK(sa[0].name == "loss_scale/log2");
	CHECK(sa[0].tensor.dtype() == DType::f32);
	CHECK(sa[1].name == "loss_scale/clean_steps");
	CHECK(sa[1].tensor.dtype() == DType::i64);
	LossScaler b(o);
	std::vector<NamedTensor> sb = b.state();
	for (size_t i = 0; i < sa.size(); ++i)
		sb[i].tensor.copy_from(sa[i].tensor);
	CHECK(b.scale() == a.scale());
	CHECK(clean_steps(b) == 2);
	// Both go on identically: two more clean steps reach the interval.
	for (LossScaler* s : {&a, &b}) {
		s->update(false);
		s->update(false);
	}
	CHECK(a.scale() == 131072.0f);
	CHECK(b.scale() == 131072.0f);
}

TEST_CASE("the scaler refuses a static scale that is not positive and finite, and a growth interval below 1")
{
	for (float bad : {0.0f, -0.0f, -2.0f, std::numeric_limits<float>::infinity(),
			  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
		CAPTURE(bad);
		LossScaleOptions o;
		o.mode = LossScaleMode::fixed;
		o.fixed_scale = bad;
		CHECK_THROWS_WITH_AS(LossScaler{o}, doctest::Contains("a static loss scale must be positive and finite"),
				     AgreedError);
	}
	// The interval is checked in every mode, not only where the growth policy uses it.
	for (const std::string form : {"dynamic:growth", "dynamic:log2", "static:8", "none"})
		for (int64_t interval : {int64_t{0}, int64_t{-1}}) {
			CAPTURE(form);
			CAPTURE(interval);
			LossScaleOptions o = parse_loss_scale(form);
			o.growth_interval = interval;
			CHECK_THROWS_WITH_AS(LossScaler{o},
					     doctest::Contains(fmt::format("the growth interval is {} but must be positive",
									   interval).c_str()),
					     Error);
		}
	// The smallest valid settings are accepted.
	LossScaleOptions o = parse_loss_scale("dynamic:growth");
	o.growth_interval = 1;
	CHECK_NOTHROW(LossScaler{o});
	CHECK_NOTHROW(LossScaler{parse_loss_scale("static:1e-30")});
}
