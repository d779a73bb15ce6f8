#include "cli/spec_bench.h"

#include <fmt/format.h>

#include <cmath>

namespace hypura::cli {
namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double tokens_per_pass(const SpecBenchRow& r) {
  return r.spec.passes > 0 ? static_cast<double>(r.generated) / r.spec.passes : 0;
}

}  // namespace

Result<std::vector<SpecBenchRow>> run_spec_bench(runtime::Engine& engine,
                                                 const SpecBenchOptions& o) {
  HYPURA_ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                          engine.tokenize_chat({{"user", o.text}}, runtime::ChatOptions{}));
  runtime::GenerateOptions plain;
  plain.max_tokens = o.n_gen;
  plain.sampling.temperature = 0;
  plain.sampling.repeat_penalty = 1.0f;
  runtime::GenerateOptions spec = plain;
  spec.speculation = o.speculation;
  std::vector<SpecBenchRow> rows(o.speculation.on() ? 2 : 1);
  rows[0].mode = "plain";
  if (rows.size() > 1) rows[1].mode = o.speculation.draft_model ? "draft" : "lookup";
  std::vector<std::vector<double>> tps(rows.size());
  auto session = engine.new_session();
  for (int rep = -1; rep < o.reps; ++rep) {  // rep -1: the untimed warm-up
    for (size_t m = 0; m < rows.size(); ++m) {
      HYPURA_ASSIGN_OR_RETURN(runtime::GenerateResult r,
                              session->generate(prompt, m == 0 ? plain : spec, nullptr));
      if (rep < 0) continue;
      tps[m].push_back(r.generate_seconds > 0 ? r.generated_tokens / r.generate_seconds : 0);
      rows[m].generated = r.generated_tokens;
      rows[m].spec = r.spec;
      rows[m].text = r.text;
    }
  }
  for (size_t m = 0; m < rows.size(); ++m) {
    rows[m].tps_mean = mean(tps[m]);
    rows[m].tps_stddev = stddev(tps[m]);
  }
  return rows;
}

std::string spec_table(const std::vector<SpecBenchRow>& rows) {
  std::string out =
      "| mode | tokens | t/s | guesses | kept | off the main branch: guesses, kept | passes | "
      "tokens a pass |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const SpecBenchRow& r : rows) {
    out +=
        fmt::format("| {} | {} | {:.2f} ± {:.2f} | {} | {} | {}, {} | {} | {:.2f} |\n", r.mode,
                    r.generated, r.tps_mean, r.tps_stddev, r.spec.drafted, r.spec.accepted,
                    r.spec.side_drafted, r.spec.side_accepted, r.spec.passes, tokens_per_pass(r));
  }
  if (rows.size() > 1 && rows[0].tps_mean > 0) {
    out += fmt::format("speculation: {:.2f}x the plain runs' tok/s; the same output: {}\n",
                       rows[1].tps_mean / rows[0].tps_mean,
                       rows[1].text == rows[0].text ? "yes" : "NO");
  }
  return out;
}

nlohmann::json spec_json(const std::vector<SpecBenchRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const SpecBenchRow& r : rows) {
    j.push_back({{"mode", r.mode},
                 {"generated_tokens", r.generated},
                 {"tps_mean", r.tps_mean},
                 {"tps_stddev", r.tps_stddev},
                 {"drafted", r.spec.drafted},
                 {"accepted", r.spec.accepted},
                 {"side_drafted", r.spec.side_drafted},
                 {"side_accepted", r.spec.side_accepted},
                 {"target_passes", r.spec.passes},
                 {"tokens_per_pass", tokens_per_pass(r)},
                 {"same_output_as_plain", r.text == rows[0].text}});
  }
  return j;
}

}  // namespace hypura::cli
