// A grayscale PNG writer (zlib for the compression): enough to look at generated samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gan {

// Writes `pixels` (row-major, width x height, 0 black .. 255 white) to `path` through a temporary
// file renamed into place. Throws std::runtime_error naming the path when it cannot.
void write_gray_png(const std::string& path, int width, int height, const std::vector<uint8_t>& pixels);

// `images` (count x 28 x 28 values in [-1, 1]) tiled `columns` wide into one picture, 2-pixel gaps.
std::vector<uint8_t> tile(const std::vector<float>& images, int count, int columns, int* width, int* height);

} // namespace gan
