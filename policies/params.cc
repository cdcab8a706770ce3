#include "policies/params.h"

#include <algorithm>

#include "common/errors.h"

namespace kvb {
namespace {

// JSON types that may stand in for one another: any number for a number default, integers only
// for an integer default.
bool same_kind(const nlohmann::json& given, const nlohmann::json& fallback) {
  if (fallback.is_number_integer())
    return given.is_number_integer() ||
           (given.is_number_float() &&
            given.get<double>() == static_cast<long long>(given.get<double>()));
  if (fallback.is_number()) return given.is_number();
  if (fallback.is_null()) return true;  // a default of null accepts any value
  return given.type() == fallback.type();
}

std::string kind_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_boolean()) return "true or false";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  return "any value";
}

}  // namespace

PolicyParams::PolicyParams(std::string policy, const nlohmann::json& given,
                           const nlohmann::json& defaults)
    : policy_(std::move(policy)),
      values_(defaults.is_null() ? nlohmann::json::object() : defaults) {
  if (given.is_null()) return;
  if (!given.is_object())
    throw InputError("parameters of policy '" + policy_ + "' must be a JSON object, got " +
                     given.dump());
  for (const auto& [key, value] : given.items()) {
    if (!values_.contains(key))
      throw InputError("unknown parameter '" + key + "' for policy '" + policy_ +
                       "' (known: " + known_list() + ")");
    if (!same_kind(value, values_[key]))
      throw InputError("parameter '" + key + "' of policy '" + policy_ + "' must be " +
                       kind_name(values_[key]) + ", got " + value.dump());
    values_[key] = value;
  }
}

std::string PolicyParams::known_list() const {
  std::string list;
  for (const auto& [key, value] : values_.items()) list += (list.empty() ? "" : ", ") + key;
  return list.empty() ? "none" : list;
}

const nlohmann::json& PolicyParams::at(const std::string& name) const {
  if (!values_.contains(name))
    throw std::logic_error("policy '" + policy_ + "' reads undeclared parameter '" + name + "'");
  return values_.at(name);
}

int PolicyParams::integer(const std::string& name) const {
  const auto& value = at(name);
  return value.is_number_float() ? static_cast<int>(value.get<double>()) : value.get<int>();
}
double PolicyParams::number(const std::string& name) const { return at(name).get<double>(); }
bool PolicyParams::boolean(const std::string& name) const { return at(name).get<bool>(); }
std::string PolicyParams::text(const std::string& name) const {
  return at(name).get<std::string>();
}
const nlohmann::json& PolicyParams::raw(const std::string& name) const { return at(name); }

std::string PolicyParams::choice(const std::string& name,
                                 const std::vector<std::string>& allowed) const {
  const std::string value = text(name);
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    std::string options;
    for (const auto& option : allowed) options += (options.empty() ? "" : "|") + option;
    throw InputError("parameter '" + name + "' of policy '" + policy_ + "' is '" + value +
                     "'; use one of " + options);
  }
  return value;
}

std::vector<int> PolicyParams::integers(const std::string& name) const {
  const auto& value = at(name);
  std::vector<int> out;
  for (const auto& item : value) {
    if (!item.is_number_integer())
      throw InputError("parameter '" + name + "' of policy '" + policy_ +
                       "' must be a list of integers, got " + value.dump());
    out.push_back(item.get<int>());
  }
  return out;
}

}  // namespace kvb
