// SHA-256 (FIPS 180-4) of files and strings, for model provenance in results (LoadedModel::sha256).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvb {

std::string sha256_hex(std::string_view bytes);
// Hash of the concatenated contents of the files, in the given order; InputError if one is
// unreadable.
std::string sha256_hex_of_files(const std::vector<std::filesystem::path>& files);

}  // namespace kvb
