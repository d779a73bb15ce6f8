// Reading optional fields of JSON that came from the network or a file someone may have
// edited: a field of the wrong type reads as absent (nlohmann's value() would throw).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace hypura::store {

inline std::string string_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

inline uint64_t unsigned_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

inline int64_t integer_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace hypura::store
