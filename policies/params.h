// Policy parameters read from JSON. Every method declares its parameters as a JSON object of
// defaults (the values of docs/methods.md); a user's JSON overrides them. A key the method does not
// declare, or a value of the wrong type, is an InputError naming the key and listing the known
// ones, so that a typo never silently runs the default.
//
// Shared names (the same meaning in every method that has them):
//   window                  protected observation window w (last w prompt tokens), tokens
//   kernel                  1-D pooling kernel along the token axis (odd; 1 = no pooling)
//   pooling                 "avg" | "max" (PyTorch avg_pool1d / max_pool1d edge semantics)
//   sinks                   protected first tokens (attention sinks)
//   alpha                   AdaKV's floor ratio
//   dense_layers            layers left uncompressed; [] = none
//   precision               "bf16" (emulate the reference's bf16 casts) | "fp32"
//   budget_includes_window  whether the protected tokens count inside the per-head budget
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvb {

class PolicyParams {
 public:
  // Throws InputError for unknown keys or type mismatches; `policy` names the method in messages.
  PolicyParams(std::string policy, const nlohmann::json& given, const nlohmann::json& defaults);

  int integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  std::string text(const std::string& name) const;
  // A string that must be one of `allowed`.
  std::string choice(const std::string& name, const std::vector<std::string>& allowed) const;
  std::vector<int> integers(const std::string& name) const;
  const nlohmann::json& raw(const std::string& name) const;

  // Defaults with the user's values applied (recorded with results).
  const nlohmann::json& resolved() const { return values_; }
  const std::string& policy() const { return policy_; }

 private:
  const nlohmann::json& at(const std::string& name) const;
  std::string known_list() const;

  std::string policy_;
  nlohmann::json values_;
};

}  // namespace kvb
