#include "src/plan/layout_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "src/plan/count.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/plan.hpp"

namespace tptrain::plan {

namespace {

std::vector<int> divisors_of(std::int64_t n) {
  std::vector<int> low, high;
  for (std::int64_t k = 1; k * k <= n; ++k)
    if (n % k == 0) {
      low.push_back(static_cast<int>(k));
      if (k != n / k && n / k <= std::numeric_limits<int>::max()) high.push_back(static_cast<int>(n / k));
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

SearchResult search_layouts(const Config& deck, const Machine& m, std::int64_t gpus, std::size_t count) {
  SearchResult result;
  std::vector<RankedLayout> fitting;
  const double limit = m.memory_gib * kGiB;
  std::vector<int> contexts{1};
  if (deck.context_allowed && deck.shape.seq_length % 2 == 0)
    for (const int cp : divisors_of(deck.shape.seq_length / 2))
      if (cp > 1 && gpus % cp == 0 && cp <= 64) contexts.push_back(cp);
  std::vector<int> micro_batches{1, 2, 4, 8};
  if (std::find(micro_batches.begin(), micro_batches.end(), deck.micro_batch) == micro_batches.end())
    micro_batches.push_back(deck.micro_batch);
  for (const int t : divisors_of(m.devices)) {
    if (gpus % t != 0) continue;
    for (const int cp : contexts) {
      if (gpus % (std::int64_t(t) * cp) != 0) continue;
      for (const int p : divisors_of(deck.shape.layers)) {
        const std::int64_t tcp = std::int64_t(t) * cp * p;
        if (gpus % tcp != 0 || gpus / tcp > std::numeric_limits<int>::max()) continue;
        const int d = static_cast<int>(gpus / tcp);
        std::vector<int> experts{1};
        if (deck.holds_experts()) experts = divisors_of(std::gcd(d, deck.shape.experts));
        for (const int ep : experts)
          for (const int v : divisors_of(deck.shape.layers / p)) {
            if (v > 1 && (p == 1 || v > 8)) continue;
            // The stages' parameters depend on neither the micro-batch nor the modes below.
            std::optional<StageParameters> parameters;
            for (const int mb : micro_batches) {
              for (const bool sp : {false, true}) {
                if (sp && t == 1) continue;
                for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
                  // The rank order places the ranks, it holds no byte: each shard mode's memory is
                  // computed once for both orders (kUnknown: not yet; kInvalid: the layout throws).
                  constexpr std::int64_t kUnknown = -1, kInvalid = -2;
                  constexpr const char* kShardModes[] = {"optimizer", "gradients", "parameters"};
                  std::int64_t bytes_of_shard[3] = {kUnknown, kUnknown, kUnknown};
                  for (const parallel::RankOrder order : {parallel::RankOrder::tp_pp_dp, parallel::RankOrder::tp_dp_pp})
                  for (int shard_index = 0; shard_index < 3; ++shard_index) {
                    const char* shard = kShardModes[shard_index];
                    if (order == parallel::RankOrder::tp_dp_pp && p == 1) continue;  // the same ranks
                    Config c = deck;
                    c.shape.tensor = t;
                    c.set_context(cp);
                    c.pipeline = p;
                    c.virtual_stages = v;
                    c.data = d;
                    c.shape.expert = ep;
                    c.micro_batch = mb;
                    c.sequence_parallel = sp;
                    c.recompute = r;
                    c.order = order;
                    // Data x context > 1: the optimizer state sharded, and the gradients and weights too or not.
                    c.set_shard(c.data_context() > 1 ? shard : "none");
                    c.shard_group = 0;  // the modes over all data x context ranks
                    if (c.data_context() == 1 && std::string(shard) != "optimizer") continue;
                    if (!c.layout_problem().empty()) continue;
                    if (c.global_batch % (mb * d) != 0) continue;
                    if (v > 1 && c.micro_batches() % p != 0) continue;
                    std::int64_t& bytes = bytes_of_shard[shard_index];
                    if (bytes == kUnknown) {
                      try {
                        c.shape.validate(mb);
                        model::validate_kinds(c.shape);
                        if (!parameters) parameters = stage_parameters(c.shape, p, v);
                        bytes = most_loaded_rank(c, *parameters).total();
                      } catch (const std::exception&) {
                        bytes = kInvalid;
                      }
                    }
                    if (bytes == kInvalid || double(bytes) > limit) continue;
                    fitting.push_back(RankedLayout{c, changed_keys(deck, c), bytes, {}});
                  }
                }
              }
            }
          }
      }
    }
  }
  result.fitting = fitting.size();
  // Simulated in the order of their compute-only bound (compute_lower_bound): once a layout's
  // bound is slower than the count-th fastest step found, it and every layout after it cannot be
  // among the fastest and are not simulated. The ranking is that of simulating them all: by step,
  // then fewer changed keys, then enumeration order.
  struct Candidate {
    double bound;
    std::size_t index;
  };
  std::vector<Candidate> order;
  order.reserve(fitting.size());
  for (std::size_t i = 0; i < fitting.size(); ++i) order.push_back({compute_lower_bound(fitting[i].config, m), i});
  std::sort(order.begin(), order.end(),
            [](const Candidate& a, const Candidate& b) { return a.bound != b.bound ? a.bound < b.bound : a.index < b.index; });
  const auto faster = [&](const std::pair<std::size_t, double>& a, const std::pair<std::size_t, double>& b) {
    if (a.second != b.second) return a.second < b.second;
    if (fitting[a.first].sets.size() != fitting[b.first].sets.size())
      return fitting[a.first].sets.size() < fitting[b.first].sets.size();
    return a.first < b.first;
  };
  std::vector<std::pair<std::size_t, double>> ranked;  // (index, step), the fastest `count` so far, sorted
  std::size_t simulated = 0;
  for (const Candidate& x : order) {
    if (count > 0 && ranked.size() >= count && x.bound > ranked.back().second) break;
    RankedLayout& l = fitting[x.index];
    try {
      l.simulation = simulate_step(l.config, m);
    } catch (const std::invalid_argument&) {
      continue;
    }
    ++simulated;
    const std::pair<std::size_t, double> entry{x.index, l.simulation.step_seconds};
    ranked.insert(std::upper_bound(ranked.begin(), ranked.end(), entry, faster), entry);
    if (ranked.size() > count) ranked.pop_back();
  }
  result.simulated = simulated;
  for (const auto& [index, step] : ranked) result.best.push_back(std::move(fitting[index]));
  return result;
}

namespace {
// optimizer.shard with the ZeRO stage it is (Rajbhandari et al. 2020).
std::string zero_name(const std::string& shard) {
  if (shard == "optimizer") return "optimizer (ZeRO-1)";
  if (shard == "gradients") return "gradients (ZeRO-2)";
  if (shard == "parameters") return "parameters (ZeRO-3)";
  return shard;
}
}  // namespace

std::string search_report(const SearchResult& found, const Plan& deck) {
  std::string out;
  const auto line = [&](const std::string& s) { out += s + "\n"; };
  const Config& c = deck.config;
  line(fmt::format("# tptrain plan --search {}: {} GPUs of {} ({} per node, {:g} GiB)", deck.deck, deck.gpus,
                   deck.hardware.machine.name, deck.hardware.gpus_per_node, deck.hardware.gpu_memory_gib));
  line(fmt::format("the deck: tensor {} x context {} x pipeline {} (virtual {}) x data {}: {:.3f} s per step, MFU {:.1f} %{}",
                   c.tensor(), c.context(), c.pipeline, c.virtual_stages, c.data, deck.simulation.step_seconds,
                   100 * deck.simulation.mfu, deck.fits ? "" : " (does not fit)"));
  if (found.fitting > 0)
    line(fmt::format("{} layouts fit, {} simulated (the others' compute alone is slower than the fastest found); the fastest:",
                     found.fitting, found.simulated));
  int i = 0;
  for (const RankedLayout& l : found.best) {
    const Config& x = l.config;
    const StepSimulation& s = l.simulation;
    line("");
    line(fmt::format("{}. {:.3f} s per step, MFU {:.1f} %, {:.1f} GiB on the most loaded rank: tensor {} x context {} x "
                     "pipeline {} (virtual {}) x data {}{}, micro_batch {}, sequence parallel {}, recompute {}, order {}, "
                     "shard {}",
                     ++i, s.step_seconds, 100 * s.mfu, double(l.bytes) / (1024.0 * 1024.0 * 1024.0), x.tensor(),
                     x.context(), x.pipeline, x.virtual_stages, x.data,
                     x.expert() > 1 ? fmt::format(" (expert {})", x.expert()) : std::string(), x.micro_batch,
                     x.sequence_parallel ? "on" : "off", recompute_name(x.recompute),
                     parallel::rank_order_name(x.order), zero_name(x.shard())));
    line(step_breakdown_text("   average rank       ", s.average, s.step_seconds));
    line(step_breakdown_text(fmt::format("   most loaded rank {:<3}", s.most_loaded.world_rank), s.most_loaded,
                             s.step_seconds));
    std::string sets;
    for (const std::string& k : l.sets) sets += " --set " + k;
    line("   " + (sets.empty() ? std::string("(the deck's layout)") : sets.substr(1)));
    std::string lines = deck_lines(x);
    std::string indented;
    for (std::size_t a = 0, b; a < lines.size(); a = b + 1) {
      b = lines.find('\n', a);
      indented += "   | " + lines.substr(a, b - a) + "\n";
    }
    out += indented;
  }
  if (found.best.empty()) line("no layout of these GPUs fits");
  return out;
}

std::string deck_lines(const Config& c) {
  std::string out = "[parallel]\n";
  out += fmt::format("tensor = {}\n", c.tensor());
  if (c.context() > 1) out += fmt::format("context = {}\n", c.context());
  out += fmt::format("pipeline = {}\n", c.pipeline);
  if (c.virtual_stages > 1) out += fmt::format("virtual_stages = {}\n", c.virtual_stages);
  out += fmt::format("data = {}\n", c.data);
  if (c.expert() > 1) out += fmt::format("expert = {}\n", c.expert());
  out += fmt::format("sequence_parallel = {}\n", c.sequence_parallel);
  out += fmt::format("order = \"{}\"\n", parallel::rank_order_name(c.order));
  out += "[training]\n";
  out += fmt::format("micro_batch = {}\n", c.micro_batch);
  out += fmt::format("recompute = \"{}\"\n", recompute_name(c.recompute));
  out += "[optimizer]\n";
  out += fmt::format("shard = \"{}\"\n", c.shard());
  return out;
}

}  // namespace tptrain::plan
