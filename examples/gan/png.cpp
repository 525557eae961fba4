// A grayscale PNG writer (zlib for the compression): enough to look at generated samples.
#include "png.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <zlib.h>

namespace gan {

namespace {

void put32(std::vector<uint8_t>& out, uint32_t v)
{
	for (int shift = 24; shift >= 0; shift -= 8)
		out.push_back(static_cast<uint8_t>(v >> shift));
}

// A chunk: length, type, data, and the CRC of type and data.
void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data)
{
	put32(out, static_cast<uint32_t>(data.size()));
	const size_t start = out.size();
	out.insert(out.end(), type, type + 4);
	out.insert(out.end(), data.begin(), data.end());
	put32(out, static_cast<uint32_t>(crc32(0, out.data() + start, static_cast<uInt>(out.size() - start))));
}

} // namespace

void write_gray_png(const std::string& path, int width, int height, const std::vector<uint8_t>& pixels)
{
	// Each row starts with filter type 0 (none).
	std::vector<uint8_t> raw;
	for (int y = 0; y < height; ++y) {
		raw.push_back(0);
		raw.insert(raw.end(), pixels.begin() + static_cast<long>(y) * width,
			   pixels.begin() + static_cast<long>(y + 1) * width);
	}
	uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
	std::vector<uint8_t> packed(packed_size);
	if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), 9) != Z_OK)
		throw std::runtime_error("png: compressing " + path + " failed");
	packed.resize(packed_size);

	std::vector<uint8_t> header;
	put32(header, static_cast<uint32_t>(width));
	put32(header, static_cast<uint32_t>(height));
	header.insert(header.end(), {8, 0, 0, 0, 0}); // 8-bit grayscale, deflate, no interlace
	std::vector<uint8_t> file = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	chunk(file, "IHDR", header);
	chunk(file, "IDAT", packed);
	chunk(file, "IEND", {});

	const std::string partial = path + ".partial";
	std::FILE* f = std::fopen(partial.c_str(), "wb");
	const bool written = f && std::fwrite(file.data(), 1, file.size(), f) == file.size();
	if (!f || std::fclose(f) != 0 || !written || std::rename(partial.c_str(), path.c_str()) != 0)
		throw std::runtime_error("png: cannot write " + path);
}

std::vector<uint8_t> tile(const std::vector<float>& images, int count, int columns, int* width, int* height)
{
	constexpr int side = 28, gap = 2;
	const int rows = (count + columns - 1) / columns;
	*width = columns * (side + gap) + gap;
	*height = rows * (side + gap) + gap;
	std::vector<uint8_t> out(static_cast<size_t>(*width) * static_cast<size_t>(*height), 0);
	for (int n = 0; n < count; ++n) {
		const int x0 = gap + (n % columns) * (side + gap), y0 = gap + (n / columns) * (side + gap);
		for (int y = 0; y < side; ++y)
			for (int x = 0; x < side; ++x) {
				const float v = images[static_cast<size_t>((n * side + y) * side + x)];
				const float level = std::clamp((v + 1.0f) * 127.5f, 0.0f, 255.0f);
				out[static_cast<size_t>((y0 + y) * *width + x0 + x)] = static_cast<uint8_t>(std::lround(level));
			}
	}
	return out;
}

} // namespace gan
