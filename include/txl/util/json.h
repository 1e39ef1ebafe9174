#pragma once
// JSON that is always valid: numbers that are not finite (an overflowing perplexity, a diverged
// loss) are written as null, and the record says why under "null_because". The records
// themselves are nlohmann::json objects, kept inside .cpp files (this header is included only
// by sources, never by public headers of other levels).

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace txl::json {

using Json = nlohmann::json;

// record[key] = value, or null with record["null_because"][key] = "nan" | "+inf" | "-inf".
inline void put_number(Json& record, const std::string& key, double value) {
  if (std::isfinite(value)) {
    record[key] = value;
    return;
  }
  record[key] = nullptr;
  record["null_because"][key] = std::isnan(value) ? "nan" : value > 0 ? "+inf" : "-inf";
}

}  // namespace txl::json
