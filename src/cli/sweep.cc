#include "cli/sweep.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/size.h"

extern char** environ;

namespace hypura::cli {
namespace {

// Runs argv with its stdout captured; stderr stays the terminal's (progress, warnings).
// Returns the exit status (-1: could not start) and fills `out`.
int run_capture(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return -1;
  }
  char buf[65536];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n > 0)
      out->append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

SweepPoint point_from_json(uint64_t budget, const nlohmann::json& j) {
  SweepPoint p;
  p.budget_bytes = budget;
  p.mode = j.value("mode", "");
  for (const auto& t : j.value("tests", nlohmann::json::array())) {
    if (t.value("test", "").rfind("tg", 0) == 0) {
      p.tg_tps = t.value("tps_mean", 0.0);
      p.tg_stddev = t.value("tps_stddev", 0.0);
    }
  }
  const nlohmann::json tiers = j.value("tiers", nlohmann::json::object());
  p.bound_tps = tiers.value("storage_bound_tps", 0.0);
  p.predicted_tps = tiers.value("predicted_tps", 0.0);
  p.peak_rss_bytes = tiers.value("peak_rss_bytes", uint64_t{0});
  p.mmap_tps = j.value("baseline", nlohmann::json::object()).value("tg_tps", 0.0);
  return p;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A round tick step giving about `n` ticks up to `max`: 1, 2 or 5 times a power of ten.
double tick_step(double max, int n) {
  const double raw = max / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// One series as SVG polylines over the points where value() > 0 (a gap breaks the line).
std::string series(const std::vector<SweepPoint>& pts,
                   const std::function<double(const SweepPoint&)>& value,
                   const std::function<double(uint64_t)>& x, const std::function<double(double)>& y,
                   const std::string& style, bool dots) {
  std::string out, line;
  const auto flush = [&] {
    if (!line.empty()) out += "<polyline fill=\"none\" " + style + " points=\"" + line + "\"/>\n";
    line.clear();
  };
  for (const auto& p : pts) {
    const double v = p.error.empty() ? value(p) : 0;
    if (v <= 0) {
      flush();
      continue;
    }
    const std::string xy = fmt("%.1f", x(p.budget_bytes)) + "," + fmt("%.1f", y(v));
    line += xy + " ";
    if (dots) {
      out += "<circle cx=\"" + fmt("%.1f", x(p.budget_bytes)) + "\" cy=\"" + fmt("%.1f", y(v)) +
             "\" r=\"3.5\" fill=\"#1f5fbf\"><title>" + format_size(p.budget_bytes) + ": " +
             fmt("%.3g", v) + " tok/s</title></circle>\n";
    }
  }
  flush();
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<SweepPoint> run_sweep(const std::string& exe,
                                  const std::vector<std::string>& child_args,
                                  const std::vector<uint64_t>& budgets) {
  std::vector<SweepPoint> points;
  for (uint64_t budget : budgets) {
    std::vector<std::string> argv = {exe, "bench"};
    argv.insert(argv.end(), child_args.begin(), child_args.end());
    argv.insert(argv.end(), {"--ram-budget", std::to_string(budget), "--json"});
    std::fprintf(stderr, "sweep: --ram-budget %s\n", format_size(budget).c_str());
    std::string out;
    const int rc = run_capture(argv, &out);
    const auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (rc != 0 || j.is_discarded() || !j.is_object()) {
      SweepPoint p;
      p.budget_bytes = budget;
      p.error =
          rc == -1 ? "could not start " + exe : "bench exited with status " + std::to_string(rc);
      points.push_back(p);
      continue;
    }
    points.push_back(point_from_json(budget, j));
  }
  return points;
}

std::string sweep_table(const std::vector<SweepPoint>& points) {
  std::string t =
      "| RAM budget | mode | tg tok/s | storage bound | predicted | plain mmap | peak RSS |\n"
      "|---:|---|---:|---:|---:|---:|---:|\n";
  const auto num = [](double v) { return v > 0 ? fmt("%.3g", v) : std::string("-"); };
  for (const auto& p : points) {
    if (!p.error.empty()) {
      t += "| " + format_size(p.budget_bytes) + " | " + p.error + " | | | | | |\n";
      continue;
    }
    t += "| " + format_size(p.budget_bytes) + " | " + p.mode + " | " + fmt("%.3g", p.tg_tps) +
         " ± " + fmt("%.2g", p.tg_stddev) + " | " + num(p.bound_tps) + " | " +
         num(p.predicted_tps) + " | " + num(p.mmap_tps) + " | " + format_size(p.peak_rss_bytes) +
         " |\n";
  }
  return t;
}

std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  constexpr double kW = 640, kH = 400, kLeft = 60, kRight = 20, kTop = 40, kBottom = 50;
  uint64_t max_budget = 1;
  double max_tps = 0;
  for (const auto& p : points) {
    max_budget = std::max(max_budget, p.budget_bytes);
    if (p.error.empty()) max_tps = std::max({max_tps, p.tg_tps, p.predicted_tps, p.mmap_tps});
  }
  // The bound may be far above the measurements where little streams: it is clipped.
  const double y_max = max_tps > 0 ? max_tps * 1.15 : 1;
  const double x_max = static_cast<double>(max_budget) / (1u << 30) * 1.08;
  const auto x = [&](uint64_t b) {
    return kLeft + (static_cast<double>(b) / (1u << 30)) / x_max * (kW - kLeft - kRight);
  };
  const auto y = [&](double v) {
    return kH - kBottom - std::min(v, y_max * 1.05) / y_max * (kH - kTop - kBottom);
  };

  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\" viewBox=\"0 0 640 "
      "400\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"640\" height=\"400\" "
      "fill=\"white\"/>\n";
  s += "<text x=\"" + fmt("%.0f", kLeft) + "\" y=\"22\" font-size=\"13\">" + xml_escape(title) +
       "</text>\n";
  // Axes, grid and ticks.
  const double step = tick_step(y_max, 5);
  for (double v = 0; v <= y_max + 1e-9; v += step) {
    s += "<line x1=\"" + fmt("%.0f", kLeft) + "\" x2=\"" + fmt("%.0f", kW - kRight) + "\" y1=\"" +
         fmt("%.1f", y(v)) + "\" y2=\"" + fmt("%.1f", y(v)) + "\" stroke=\"#e4e4e4\"/>\n";
    s += "<text x=\"" + fmt("%.0f", kLeft - 6) + "\" y=\"" + fmt("%.1f", y(v) + 4) +
         "\" text-anchor=\"end\">" + fmt("%g", v) + "</text>\n";
  }
  for (const auto& p : points) {
    s += "<text x=\"" + fmt("%.1f", x(p.budget_bytes)) + "\" y=\"" +
         fmt("%.0f", kH - kBottom + 16) + "\" text-anchor=\"middle\">" +
         format_size(p.budget_bytes) + "</text>\n";
  }
  s += "<line x1=\"" + fmt("%.0f", kLeft) + "\" x2=\"" + fmt("%.0f", kLeft) + "\" y1=\"" +
       fmt("%.0f", kTop) + "\" y2=\"" + fmt("%.0f", kH - kBottom) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + fmt("%.0f", kLeft) + "\" x2=\"" + fmt("%.0f", kW - kRight) + "\" y1=\"" +
       fmt("%.0f", kH - kBottom) + "\" y2=\"" + fmt("%.0f", kH - kBottom) +
       "\" stroke=\"black\"/>\n";
  s += "<text x=\"" + fmt("%.0f", (kW + kLeft) / 2) + "\" y=\"" + fmt("%.0f", kH - 14) +
       "\" text-anchor=\"middle\">--ram-budget</text>\n";
  s += "<text transform=\"rotate(-90)\" x=\"" + fmt("%.0f", -(kH - kBottom + kTop) / 2) +
       "\" y=\"16\" text-anchor=\"middle\">generated tokens per second</text>\n";
  // Series, then the legend.
  s += "<clipPath id=\"plot\"><rect x=\"" + fmt("%.0f", kLeft) + "\" y=\"" + fmt("%.0f", kTop) +
       "\" width=\"" + fmt("%.0f", kW - kLeft - kRight) + "\" height=\"" +
       fmt("%.0f", kH - kTop - kBottom) + "\"/></clipPath>\n";
  s += "<g clip-path=\"url(#plot)\">\n";
  s += series(
      points, [](const SweepPoint& p) { return p.bound_tps; }, x, y,
      "stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"", false);
  s += series(
      points, [](const SweepPoint& p) { return p.predicted_tps; }, x, y,
      "stroke=\"#888\" stroke-width=\"1.5\" stroke-dasharray=\"2 3\"", false);
  s += series(
      points, [](const SweepPoint& p) { return p.mmap_tps; }, x, y,
      "stroke=\"#27ae60\" stroke-width=\"1.5\"", false);
  s += "</g>\n";
  s += series(
      points, [](const SweepPoint& p) { return p.tg_tps; }, x, y,
      "stroke=\"#1f5fbf\" stroke-width=\"2\"", true);
  struct Key {
    const char* label;
    const char* style;
    bool shown;
  };
  const auto any = [&](double SweepPoint::*field) {
    return std::any_of(points.begin(), points.end(),
                       [&](const SweepPoint& p) { return p.*field > 0; });
  };
  const Key keys[] = {
      {"measured", "stroke=\"#1f5fbf\" stroke-width=\"2\"", true},
      {"storage bound (same-run disk rate)",
       "stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"",
       any(&SweepPoint::bound_tps)},
      {"planner's prediction", "stroke=\"#888\" stroke-width=\"1.5\" stroke-dasharray=\"2 3\"",
       any(&SweepPoint::predicted_tps)},
      {"plain mmap", "stroke=\"#27ae60\" stroke-width=\"1.5\"", any(&SweepPoint::mmap_tps)},
  };
  double ly = kTop + 8;
  for (const auto& k : keys) {
    if (!k.shown) continue;
    s += "<line x1=\"" + fmt("%.0f", kLeft + 14) + "\" x2=\"" + fmt("%.0f", kLeft + 40) +
         "\" y1=\"" + fmt("%.0f", ly) + "\" y2=\"" + fmt("%.0f", ly) + "\" " + k.style + "/>\n";
    s += "<text x=\"" + fmt("%.0f", kLeft + 46) + "\" y=\"" + fmt("%.0f", ly + 4) + "\">" +
         k.label + "</text>\n";
    ly += 16;
  }
  return s + "</svg>\n";
}

}  // namespace hypura::cli
