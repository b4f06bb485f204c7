// The synthetic workload of `qsp-devtool produce --realistic` (the records
// scripts/bench produces), shared with bench/hotpath.cpp so that both
// generate the same records from the same seed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace qsp::workload {

/// Draws ranks in [0, n) with P(k) ~ 1/(k+1)^s, by inverting a continuous approximation.
class zipf {
public:
  zipf(double n, double s) : n_(n), s_(s) {}
  template <class Rng>
  uint64_t operator()(Rng& rng) {
    std::uniform_real_distribution<double> u{0, 1};
    double x = u(rng);
    double one_minus_s = 1 - s_;
    double v = std::pow(x * (std::pow(n_ + 1, one_minus_s) - 1) + 1, 1 / one_minus_s) - 1;
    return static_cast<uint64_t>(std::min(v, n_ - 1));
  }

private:
  double n_, s_;
};

/// The rest of a realistic dispatch envelope, appended before the closing '}'.
inline void add_envelope(std::string& json, long long seq, std::mt19937_64& rng, const std::string& sender) {
  static const char* words[] = {"ok", "see", "you", "tomorrow", "meeting", "at", "the", "office",
                                "thanks", "café", "déjà", "vu", "👍", "lunch", "?", "call", "me",
                                "when", "free", "sent", "the", "file", "Grüße", "sure"};
  std::uniform_int_distribution<int> len{20, 140};
  std::uniform_int_distribution<size_t> word{0, sizeof(words) / sizeof(words[0]) - 1};
  std::uniform_int_distribution<int> attachments{0, 3};
  char id[40];
  std::snprintf(id, sizeof(id), "m-%016llx-%llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(seq));
  std::string preview;
  for (int n = len(rng); static_cast<int>(preview.size()) < n;) {
    if (!preview.empty())
      preview += ' ';
    preview += words[word(rng)];
  }
  json.pop_back(); // '}'
  json += ",\"message_id\":\"";
  json += id;
  json += "\",\"sender\":\"" + sender + "\",\"kind\":\"text\",\"seq\":" + std::to_string(seq);
  json += ",\"preview\":\"" + preview + "\",\"attachments\":" + std::to_string(attachments(rng));
  json += ",\"silent\":false}";
}

} // namespace qsp::workload
