// How a front end spells the library's option fields. The library names a field by its id in
// backquotes (`fusion_mb`) in every message; tower train says --fusion-mb, tower.torch fusion_mb=.
#pragma once

#include <functional>
#include <string>

namespace tower {

// Installs the front end's spelling of a field id; once per process, before the first message.
void set_field_spelling(std::function<std::string(const std::string& id)> spell);

// `message` with each backquoted field id as the front end spells it (as it is, backquotes and
// all, until one installs a spelling).
std::string spelled(const std::string& message);

} // namespace tower
