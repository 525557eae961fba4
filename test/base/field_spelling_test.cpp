// The library's backquoted field ids in a front end's spelling.
#include <doctest/doctest.h>

#include "base/field_spelling.h"

TEST_CASE("backquoted field ids take the installed spelling; anything else stays as it is")
{
	const std::string message = "`fusion_mb` -1: out of range; `strategy` async, not `Replicated` or `` or `a b`";
	CHECK(tower::spelled(message) == message); // none installed yet
	tower::set_field_spelling([](const std::string& id) { return "--" + id; });
	CHECK(tower::spelled(message) == "--fusion_mb -1: out of range; --strategy async, not `Replicated` or `` or `a b`");
	CHECK(tower::spelled("`x2_y`") == "--x2_y");
	CHECK(tower::spelled("`2x`, `unclosed") == "`2x`, `unclosed");
	tower::set_field_spelling({});
	CHECK(tower::spelled("`lr`") == "`lr`");
}
