#include "datasets/sample.h"

namespace kvb {

void to_json(nlohmann::json& out, const Sample& s) {
  out = nlohmann::json{{"id", s.id},
                       {"benchmark", s.benchmark},
                       {"task", s.task},
                       {"context_part", s.context_part},
                       {"question_part", s.question_part},
                       {"answer_prefix", s.answer_prefix},
                       {"references", s.references},
                       {"all_classes", s.all_classes},
                       {"max_new_tokens", s.max_new_tokens},
                       {"length", s.length},
                       {"depth", s.depth},
                       {"use_chat_template", s.use_chat_template}};
  if (!s.extra.is_null()) out["extra"] = s.extra;
}

void from_json(const nlohmann::json& in, Sample& s) {
  s.id = in.at("id").get<std::string>();
  s.benchmark = in.at("benchmark").get<std::string>();
  s.task = in.at("task").get<std::string>();
  s.context_part = in.at("context_part").get<std::string>();
  s.question_part = in.value("question_part", std::string());
  s.answer_prefix = in.value("answer_prefix", std::string());
  s.references = in.at("references").get<std::vector<std::string>>();
  s.all_classes = in.value("all_classes", std::vector<std::string>());
  s.max_new_tokens = in.value("max_new_tokens", 32);
  s.length = in.value("length", 0);
  s.depth = in.value("depth", -1.0);
  s.use_chat_template = in.value("use_chat_template", true);
  s.extra = in.value("extra", nlohmann::json());
}

}  // namespace kvb
