#include "server/api_context.h"

#include <algorithm>

#include "server/errors.h"

namespace tf::server {

std::vector<std::string> ApiContext::model_ids() const {
  std::vector<std::string> ids;
  ids.push_back(options.name.empty() ? info().id : options.name);
  for (const auto& a : options.aliases) {
    if (std::find(ids.begin(), ids.end(), a) == ids.end()) ids.push_back(a);
  }
  return ids;
}

std::string ApiContext::check_model(const std::string* requested) const {
  auto ids = model_ids();
  if (!requested) return ids.front();
  if (std::find(ids.begin(), ids.end(), *requested) == ids.end()) throw model_not_found(*requested);
  return *requested;
}

}  // namespace tf::server
