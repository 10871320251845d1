// The engine: owns the model, the KV block pool and the streams; runs rounds on its own thread. Each
// round puts decode rows of running streams and prefill chunks of new prompts into one forward.
#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/draft_policy.h"
#include "engine/drafters/draft_model.h"
#include "engine/drafters/mtp.h"
#include "engine/drafters/ngram.h"
#include "engine/json_tokens.h"
#include "engine/kv_cache.h"
#include "engine/kv_store.h"
#include "engine/prefix_cache.h"
#include "engine/round_cost.h"
#include "engine/sequence.h"
#include "models/model.h"
#include "models/weight_stats.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#ifndef TF_VERSION
#define TF_VERSION "0.1.0"
#endif

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
    case FinishReason::None:
      break;
  }
  return "none";
}

namespace {

constexpr int kBlockSize = 16;

std::string hex64(uint64_t v) {
  std::ostringstream o;
  o << std::hex << v;
  return o.str();
}

std::unique_ptr<Backend> pick_backend(const std::string& want) {
  if (want == "cpu") return make_cpu_backend();
  if (want != "auto" && want != "cuda")
    throw Error("--backend must be auto, cuda or cpu (got '" + want + "')");
  std::string why;
  auto cuda = make_cuda_backend(0, &why);
  if (cuda) return cuda;
  if (want == "cuda") throw Error("--backend cuda: " + why);
  return make_cpu_backend();
}

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& opt)
      : opt_(opt),
        ckpt_(Checkpoint::open(opt.model_path)),
        spec_(parse_spec(ckpt_.config())),
        tokenizer_(Tokenizer::load(opt.model_path)),
        pad_mode_(parse_pad_drafts(opt.pad_drafts)) {
    try {
      chat_template_ = std::make_unique<ChatTemplate>(ChatTemplate::from_dir(opt.model_path));
    } catch (const Error&) {
      chat_template_.reset();  // base models without a template still serve /v1/completions
    }
    backend_ = opt.backend_factory ? opt.backend_factory() : pick_backend(opt.backend);
    const int context = opt.context > 0 ? opt.context : std::min(spec_.native_context, 32768);
    TF_CHECK(context >= 2, "--context must be at least 2");
    context_ = context;
    if (opt_.prefill_chunk <= 0)
      opt_.prefill_chunk = auto_prefill_chunk(backend_->total_memory(), row_bytes());
    model_ = load_model(ckpt_, *backend_, context);
    const int per_stream = KvBlockPool::blocks_for(context, kBlockSize);
    const int64_t per_block = spec_.kv_bytes_per_token(dtype_size(backend_->act_dtype())) * kBlockSize;
    const int64_t cache_bytes = int64_t(opt.prompt_cache_gib * double(1ull << 30));
    int blocks = 0;
    if (opt.kv_budget_bytes > 0) {
      blocks = int(int64_t(opt.kv_budget_bytes) / per_block);
    } else if (const int64_t budget = gpu_pool_budget(cache_bytes); budget >= 0) {
      // Small models would get millions of blocks: at most 256 full contexts (or --parallel's).
      const int64_t cap = int64_t(per_stream) * std::max(256, opt.parallel);
      blocks = int(std::min<int64_t>(budget / per_block, cap));
    } else {
      blocks = per_stream * std::max(1, opt.parallel > 0 ? opt.parallel : 4);
    }
    if (blocks < per_stream)
      throw Error(
          "the KV budget holds " + std::to_string(int64_t(blocks) * kBlockSize) + " tokens, less than one " +
          "stream's --context " + std::to_string(context) + "; lower --context or raise the budget" +
          (opt.kv_budget_bytes == 0 && backend_->total_memory() > 0 ? " (--gpu-memory-utilization)" : ""));
    parallel_ = opt.parallel > 0 ? opt.parallel : std::clamp(blocks / per_stream, 1, 64);
    log_info("KV pool: " + std::to_string(int64_t(blocks) * kBlockSize) + " tokens (" +
             std::to_string(blocks / per_stream) + " full contexts of " + std::to_string(context) + "), " +
             std::to_string(parallel_) + " streams, " + std::to_string(opt_.prefill_chunk) +
             " prompt tokens a round");
    const int cache_blocks = int(cache_bytes / per_block);
    pool_ = std::make_unique<KvBlockPool>(*backend_, spec_.layers, spec_.kv_heads, spec_.head_dim, kBlockSize,
                                          blocks + cache_blocks);
    setup_prompt_cache(cache_blocks);
    collect_eos();
    setup_drafters(context);
    fill_info(context);
    worker_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override { shutdown(); }

  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  const ChatTemplate* chat_template() const override { return chat_template_.get(); }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.running = int(running_.size());
    s.waiting = int(waiting_.size());
    s.kv_blocks_used = pool_->used_blocks() - prefix_cache_->idle_blocks();
    s.kv_blocks_total = pool_->num_blocks();
    s.kv_blocks_cached = prefix_cache_->retained_blocks();
    s.prompt_cache_hits = prefix_cache_->hits();
    s.prompt_cache_disk_hits = prefix_cache_->disk_hits();
    return s;
  }

  std::shared_ptr<RequestHandle> submit(GenerationRequest req) override {
    validate(req);
    auto q = std::make_shared<EventQueue>(next_id_++);
    q->set_waker([this] { cv_.notify_all(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_CHECK(!stopping_, "the engine is shutting down");
      // Requests the worker has not yet moved into free stream slots are not queued: only those beyond the
      // free slots count against max_queue (else a burst could be refused while a slot stood free).
      const int free_slots = std::max(0, parallel_ - int(running_.size()));
      if (int(waiting_.size()) - free_slots >= opt_.max_queue)
        throw Overloaded("the server is at capacity: " + std::to_string(waiting_.size()) +
                         " requests are waiting; retry shortly");
      waiting_.push_back(std::make_unique<Sequence>(std::move(req), tokenizer_, q));
    }
    cv_.notify_all();
    return q;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && !worker_.joinable()) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  // One GPU memory budget: weights (already resident) + workspace + prompt cache + KV pool within
  // --gpu-memory-utilization of the device's memory; the pool gets what is left. -1 when the device's
  // memory is unknown (the CPU backend).
  int64_t gpu_pool_budget(int64_t cache_bytes) const {
    const size_t total = backend_->total_memory();
    if (total == 0) return -1;
    const double used = double(total - backend_->free_memory());  // weights, context, other processes
    const double workspace = workspace_bytes();
    const double budget =
        opt_.gpu_memory_utilization * double(total) - used - workspace - double(cache_bytes);
    if (budget <= 0)
      throw Error("--gpu-memory-utilization " + std::to_string(opt_.gpu_memory_utilization) +
                  " leaves no room for " + "the KV cache: " + std::to_string(int64_t(used) >> 20) +
                  " MiB of " + std::to_string(total >> 20) + " MiB are in use after loading the weights");
    return int64_t(budget);
  }

  // Device bytes one row of a forward may take: every layer's buffers of a row, the permuted copy of a
  // linear's input and a quarter for what the estimate leaves out, plus the attention scratch of a row at
  // the full context (the CUDA backend sizes its partials for every row of a call: run 119, a 16,384-row
  // chunk beside a decode row at position 20,000 asked for 9 GB and failed).
  double row_bytes() const {
    const double H = spec_.hidden, I = std::max(double(spec_.intermediate),
                                                double(spec_.experts_per_tok) * spec_.moe_intermediate);
    const double heads = double(spec_.heads) * spec_.head_dim, kv = double(spec_.kv_heads) * spec_.head_dim;
    return 1.25 * double(dtype_size(backend_->act_dtype())) *
               (4 * H + 3 * heads + 2 * kv + 3 * I + std::max(H, I)) +
           double(backend_->attention_workspace_bytes(1, spec_.heads, spec_.head_dim, context_));
  }
  // Device memory for activations, logits and attention partials: a forward of --prefill-chunk prompt
  // rows plus the decode rows, at least 2 GiB.
  double workspace_bytes() const {
    const double rows = double(opt_.prefill_chunk) + std::max(opt_.parallel, 64);
    return std::max(double(2ull << 30), rows * row_bytes());
  }

  uint64_t identity() const {
    // What makes cached K/V reusable: model config, weights, dtype and kernels (backend), block size.
    std::string id = ckpt_.config().dump() + "|" + std::to_string(ckpt_.total_bytes()) + "|" +
                     backend_->name() + "|" + dtype_name(backend_->act_dtype()) +
                     "|kernels-" TF_VERSION "|block-" + std::to_string(kBlockSize);
    return std::hash<std::string>{}(id);
  }

  void setup_prompt_cache(int cache_blocks) {
    PrefixCacheOptions o;
    o.max_blocks = cache_blocks;
    o.max_prefixes = opt_.checkpoint_slots;
    const bool snapshots = !opt_.snapshot_dir.empty() && opt_.snapshot_dir != "none";
    if (cache_blocks > 0 && (snapshots || opt_.spill_gib > 0)) {
      const double gib = opt_.spill_gib > 0 ? opt_.spill_gib : 4.0;
      std::string dir = snapshots ? opt_.snapshot_dir : opt_.spill_dir;
      if (dir.empty())
        dir = (std::filesystem::temp_directory_path() / ("tensorfold-spill-" + std::to_string(getpid())))
                  .string();
      const size_t max_files = snapshots && opt_.max_snapshots > 0 ? size_t(opt_.max_snapshots) : 0;
      store_ = std::make_unique<KvDiskStore>(dir, identity(), uint64_t(gib * double(1ull << 30)), snapshots,
                                             max_files);
      o.store = store_.get();
    }
    prefix_cache_ = std::make_unique<PrefixCache>(*pool_, o);
  }

  void setup_drafters(int context) {
    if (!opt_.drafts) return;
    if (opt_.ngram_drafts)
      ngram_ = std::make_unique<NgramDrafter>(NgramOptions{opt_.ngram_min, opt_.ngram_max});
    std::string dir = opt_.drafter;
    if (opt_.drafter_factory) {
      drafter_ = opt_.drafter_factory();
      dir = "none";
    }
    if (dir == "auto") {
      const auto cand = std::filesystem::path(opt_.model_path) / "draft";
      dir = model_->has_mtp() && opt_.mtp_drafts > 0        ? "mtp"
            : std::filesystem::exists(cand / "config.json") ? cand.string()
                                                            : "none";
    }
    if (dir == "mtp") {
      if (!model_->has_mtp())
        throw Error("--drafter mtp: " + opt_.model_path + " has no MTP head (mtp.* tensors)");
      drafter_ = std::make_unique<MtpDrafter>(*model_, *backend_, context, parallel_,
                                              MtpOptions{std::max(1, opt_.mtp_drafts), opt_.mtp_confidence});
    } else if (dir != "none" && !dir.empty()) {
      drafter_ = std::make_unique<DraftModelDrafter>(dir, *backend_, context, parallel_, spec_.vocab);
    }
    drafting_ = ngram_ || drafter_;
    // The wall-clock guard judges drafting (context copies and the model drafter together: either can
    // lose to serial when verify rows and host work cost more than accepted tokens give); with a fixed
    // draft length (benchmarks of the ceiling, tests that force drafts) nothing is judged. With both
    // sources, a loss of the two together first steps down to context copies alone (DraftSources).
    if (drafting_ && opt_.draft_guard && opt_.adaptive_draft) {
      DraftGuardOptions o = opt_.draft_guard_options;
      o.model_drafter = ngram_ && drafter_;
      guard_ = std::make_unique<DraftGuard>(o);
    }
    // Until rounds are measured: an extra verify row costs about a row on the CPU, far less on a GPU.
    cost_ = CostModel(backend_->device() == Device::CPU ? 0.5 : 0.05);
  }

  void collect_eos() {
    auto add = [&](const std::vector<int32_t>& ids) {
      for (int32_t id : ids)
        if (std::find(eos_.begin(), eos_.end(), id) == eos_.end()) eos_.push_back(id);
    };
    add(config_util::get_ids(ckpt_.generation_config(), "eos_token_id"));
    add(spec_.eos_ids);
    if (auto e = tokenizer_.eos_id()) add({*e});
  }

  void fill_info(int context) {
    info_.path = opt_.model_path;
    info_.id = opt_.name.empty() ? std::filesystem::path(opt_.model_path).filename().string() : opt_.name;
    info_.family = spec_.family;
    const WeightStats w = weight_stats(ckpt_.summary());
    info_.parameters = w.parameters;
    info_.dtype = w.format;
    if (info_.dtype.find(' ') == std::string::npos)
      for (auto& c : info_.dtype) c = char(std::tolower(c));  // "bf16"; quantized formats stay as described
    info_.native_context = spec_.native_context;
    info_.context = context;
    info_.backend = backend_->name();
    if (graphs_replayed()) info_.backend += ", CUDA graphs";
    info_.drafter = drafter_ ? drafter_->name() : "none";
    info_.weight_bytes = ckpt_.total_bytes();
    info_.kv_bytes = pool_->bytes();
    info_.kv_tokens = int64_t(pool_->num_blocks()) * kBlockSize;
    info_.parallel = parallel_;
    uint64_t h = std::hash<std::string>{}(ckpt_.config().dump()) ^
                 (uint64_t(ckpt_.total_bytes()) * 0x9e3779b97f4a7c15ULL);
    info_.fingerprint =
        "tf-" TF_VERSION "-" + backend_->name().substr(0, backend_->name().find(' ')) + "-" + hex64(h);
    const auto& g = ckpt_.generation_config();
    SamplingParams d;
    d.temperature = opt_.temperature.value_or(config_util::get_float(g, "temperature", 1.f));
    d.top_p = opt_.top_p.value_or(config_util::get_float(g, "top_p", 1.f));
    d.top_k = opt_.top_k.value_or(config_util::get_int(g, "top_k", 0));
    d.min_p = opt_.min_p.value_or(config_util::get_float(g, "min_p", 0.f));
    d.repetition_penalty = config_util::get_float(g, "repetition_penalty", 1.f);
    info_.default_sampling = d;
  }

  void validate(GenerationRequest& req) {
    if (req.prompt.empty()) throw InvalidRequest("the prompt is empty", "prompt");
    for (int32_t t : req.prompt)
      if (t < 0 || t >= spec_.vocab)
        throw InvalidRequest("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                                 std::to_string(spec_.vocab - 1) + ")",
                             "prompt");
    const int P = int(req.prompt.size()), C = info_.context;
    if (req.max_tokens <= 0) req.max_tokens = std::max(1, std::min(opt_.max_tokens, C - P));
    if (P + req.max_tokens > C)
      throw InvalidRequest("This model's maximum context length is " + std::to_string(C) +
                               " tokens. However, you requested " + std::to_string(P + req.max_tokens) +
                               " tokens (" + std::to_string(P) + " in the prompt, " +
                               std::to_string(req.max_tokens) +
                               " for the completion). Please reduce the prompt or max_tokens.",
                           "messages", "context_length_exceeded");
    if (req.sampling.temperature < 0) throw InvalidRequest("temperature must be >= 0", "temperature");
    if (req.sampling.top_p <= 0 || req.sampling.top_p > 1)
      throw InvalidRequest("top_p must be in (0, 1]", "top_p");
    if (req.sampling.top_k < 0) throw InvalidRequest("top_k must be >= 0", "top_k");
    if (req.sampling.min_p < 0 || req.sampling.min_p > 1)
      throw InvalidRequest("min_p must be in [0, 1]", "min_p");
    if (req.sampling.repetition_penalty <= 0)
      throw InvalidRequest("repetition_penalty must be > 0", "repetition_penalty");
    if (req.min_tokens < 0) throw InvalidRequest("min_tokens must be >= 0", "min_tokens");
    auto in_vocab = [&](const std::vector<int32_t>& ids, const char* name) {
      for (int32_t id : ids)
        if (id < 0 || id >= spec_.vocab)
          throw InvalidRequest(
              std::string(name) + " names token " + std::to_string(id) + ", outside the vocabulary", name);
    };
    in_vocab(req.stop_token_ids, "stop_token_ids");
    in_vocab(req.allowed_token_ids, "allowed_token_ids");
    for (const auto& w : req.bad_words_ids) {
      if (w.empty()) throw InvalidRequest("bad_words holds an empty token sequence", "bad_words");
      in_vocab(w, "bad_words");
    }
    for (const auto& [id, bias] : req.sampling.logit_bias)
      if (id < 0 || id >= spec_.vocab)
        throw InvalidRequest("logit_bias names token " + std::to_string(id) + ", outside the vocabulary",
                             "logit_bias");
  }

  // The part's rows whose logits are prompt logprobs, as {first row in the part, count}: prompt positions
  // that predict a prompt token (the last prompt row predicts the reply's first token, sampled as usual)
  // and were not scored before (a preempted stream recomputes its rows).
  std::pair<int, int> prompt_scored(const Sequence& s, int part_rows) const {
    if (!s.prompt_logprobs_pending()) return {0, 0};
    const int from = std::max(s.computed, int(s.prompt_lp.size()));  // row at position k scores token k+1
    const int to = std::min(s.computed + part_rows, s.prompt_len - 1);
    return to > from ? std::pair<int, int>{from - s.computed, to - from} : std::pair<int, int>{0, 0};
  }

  // Prompt logprobs of `count` rows from position computed + offset: the row at position k scores prompt
  // token k + 1 (sampler.h score_token: the numbers a sampled token reports, from the same row).
  void score_prompt(Sequence& s, const float* logits, int offset, int count) {
    for (int i = 0; i < count; ++i) {
      const int32_t token = s.tokens[size_t(s.computed + offset + i + 1)];
      const SampleResult r =
          score_token(logits + size_t(i) * spec_.vocab, spec_.vocab, token, s.req.prompt_logprobs);
      s.prompt_lp.push_back({token, {}, r.logprob, r.top});
    }
  }

  // Whether the stream's tokens are sampled on the host from its logits rows (logprobs, penalties,
  // truncation, logit_bias, structured outputs, allowed_token_ids, bad_words, min_tokens' bans), not on the
  // device. Decided at a round's start (logit_rows_of, verify): a round whose first row is below min_tokens
  // is sampled on the host whole.
  bool host_sampled(const Sequence& s) const {
    return !device_sampleable(s.req.sampling, spec_.vocab, s.req.logprobs) || s.json ||
           !s.req.allowed_token_ids.empty() || !s.req.bad_words_ids.empty() || s.below_min_tokens();
  }

  // The ids a row may sample (nonzero = allowed; empty: all). The masks narrow in order, each only where it
  // leaves some id: a structured output's (a complete document allows EOS alone: it ends), the request's
  // allowed_token_ids, its bad words (a sequence's last token where the reply ends with the rest of it),
  // then below min_tokens the EOS ids (unless ignore_eos) and stop_token_ids banned.
  void row_mask(Sequence& s, std::vector<uint8_t>& mask) {
    mask.clear();
    if (s.json) json_filter().allowed(*s.json, mask);
    std::vector<int32_t> bad;  // the bad words' last tokens that the reply so far would complete
    const auto reply = s.tokens.begin() + s.prompt_len;
    for (const auto& w : s.req.bad_words_ids) {
      const size_t k = w.size() - 1;
      if (size_t(s.tokens.end() - reply) >= k && std::equal(w.begin(), w.end() - 1, s.tokens.end() - long(k)))
        bad.push_back(w.back());
    }
    std::vector<int32_t> ban;  // min_tokens' stop ids
    if (s.below_min_tokens()) {
      if (!s.req.ignore_eos)
        for (int32_t id : eos_)
          if (id >= 0 && id < spec_.vocab) ban.push_back(id);
      ban.insert(ban.end(), s.req.stop_token_ids.begin(), s.req.stop_token_ids.end());
    }
    const std::vector<int32_t>& only = s.req.allowed_token_ids;
    if (only.empty() && bad.empty() && ban.empty()) return;
    if (mask.empty()) mask.assign(size_t(spec_.vocab), 1);
    auto any = [](const std::vector<uint8_t>& m) {
      return std::any_of(m.begin(), m.end(), [](uint8_t v) { return v != 0; });
    };
    if (!only.empty()) {
      std::vector<uint8_t> keep(mask.size(), 0);
      for (int32_t id : only) keep[size_t(id)] = mask[size_t(id)];
      if (any(keep)) mask.swap(keep);
    }
    auto remove = [&](const std::vector<int32_t>& ids) {  // undone where it would leave no id
      if (ids.empty()) return;
      std::vector<uint8_t> was(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) was[i] = mask[size_t(ids[i])], mask[size_t(ids[i])] = 0;
      if (!any(mask))
        for (size_t i = ids.size(); i-- > 0;) mask[size_t(ids[i])] = was[i];
    };
    remove(bad);
    remove(ban);
  }

  // The vocabulary's byte trie for structured outputs, built on the engine thread at the first constrained
  // stream (a pass over the tokenizer's vocabulary).
  const JsonTokenFilter& json_filter() {
    if (!json_filter_) json_filter_ = std::make_unique<JsonTokenFilter>(tokenizer_, spec_.vocab, eos_);
    return *json_filter_;
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !running_.empty() || !waiting_.empty(); });
        if (stopping_) break;
        admit_locked();
      }
      try {
        round();
      } catch (const std::exception& e) {
        backend_->clear_error();  // whatever failed: nothing of the round is delivered later
        const bool oom = dynamic_cast<const DeviceOutOfMemory*>(&e) != nullptr;
        if (!oom || !retry_with_fewer_prompt_rows(e.what())) fail_all(e.what());
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* list : {&running_, &waiting_})
      for (auto& s : *list) finish(*s, FinishReason::Cancelled, {});
    running_.clear();
    waiting_.clear();
    if (store_ && !opt_.snapshot_dir.empty() && opt_.snapshot_dir != "none") {
      prefix_cache_->save_all();
      log_info("prompt cache: " + std::to_string(store_->files()) + " block(s) saved to " + store_->dir());
    }
    if (graphs_replayed()) {
      const Backend::GraphStats g = backend_->graph_stats();
      log_info("CUDA graphs: " + std::to_string(g.captures) + " captured, " + std::to_string(g.replays) +
               " replayed, " + std::to_string(g.eager) + " run eagerly (shape not yet recurring), " +
               std::to_string(g.cached) + " cached at the end");
    }
  }

  // Streams start when their whole prompt + reply fits in the pool, oldest first: no stream is ever cut.
  void admit_locked() {
    for (auto it = waiting_.begin(); it != waiting_.end() && int(running_.size()) < parallel_;) {
      Sequence& s = **it;
      if (s.queue->cancelled()) {
        finish(s, FinishReason::Cancelled, {});
        it = waiting_.erase(it);
        continue;
      }
      if (!admit_one(s)) break;
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
    }
  }

  // One part of a round: a stream's rows (a prefill chunk, or the last token plus its drafts).
  struct Part {
    Sequence* seq;
    int first;  // index of the part's first row in the batch
    int rows;
    bool sampled;                 // ends in sampled rows: drafts to verify, or the prompt's last row
    std::vector<int32_t> drafts;  // decode: rows 1..k verify these
    int proposed = 0;             // drafts[0..proposed) were proposed, the rest are padding (fillers)
  };

  // Shares the longest cached prefix, then reserves the rest of the stream's capacity, evicting retained
  // prefixes if the pool is short. False (nothing held) when it cannot start yet.
  bool admit_one(Sequence& s) {
    const int len = int(s.tokens.size());  // a preempted stream comes back with its reply so far
    const int want = std::min(s.prompt_len + s.req.max_tokens, len + std::max(1, opt_.growth_reserve));
    // At least the last token is computed, so its logits exist; the block it lands in stays private.
    // Prompt logprobs need every prompt row's logits: no cached prefix (the rows are computed; they are
    // the same bits as the cached ones).
    const int covered = s.prompt_logprobs_pending() ? 0 : prefix_cache_->acquire(s.tokens, len - 1, s.blocks);
    const int need = KvBlockPool::blocks_for(want, kBlockSize) - int(s.blocks.size());
    if (pool_->free_blocks() < need) prefix_cache_->make_room(need);
    if (!pool_->reserve(s.blocks, want)) {
      pool_->release(s.blocks);
      return false;
    }
    s.computed = covered;
    if (s.generated() == 0) s.usage.cached_tokens = covered;
    return true;
  }

  // Blocks for what each stream may write this round (its next chunk, or its token plus drafts), oldest
  // stream first. A stream the pool cannot serve sits the round out; when none can run, the newest is
  // preempted: its blocks go back (its prefix stays in the prompt cache) and it re-queues first, to be
  // recomputed later bitwise as it was. No stream is lost or cut short.
  std::vector<Sequence*> grow_running() {
    for (;;) {
      std::vector<Sequence*> ready;
      for (auto& s : running_) {
        const int capacity = s->prompt_len + s->req.max_tokens;
        const int pending = int(s->tokens.size()) - s->computed;
        const int want = std::min(capacity, pending > 1 ? s->computed + std::min(pending, opt_.prefill_chunk)
                                                        : int(s->tokens.size()) + opt_.max_draft);
        const int need = KvBlockPool::blocks_for(want, kBlockSize) - int(s->blocks.size());
        if (need > 0 && pool_->free_blocks() < need) prefix_cache_->make_room(need);
        pool_->reserve(s->blocks, want);  // may fall short: then the stream runs as far as its blocks reach
        if (int(s->blocks.size()) * kBlockSize > s->computed) ready.push_back(s.get());
      }
      if (!ready.empty() || running_.empty()) return ready;
      preempt_newest();
    }
  }

  void preempt_newest() {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::prev(running_.end());
    Sequence& s = **it;
    if (drafter_) drafter_->release(s);
    prefix_cache_->retain(s.tokens, s.computed, s.blocks);
    s.computed = 0;
    waiting_.push_front(std::move(*it));
    running_.erase(it);
    ++stats_.preemptions;
  }

  void round() {
    const auto round_t0 = std::chrono::steady_clock::now();
    round_prompt_rows_ = 0;
    drop_cancelled();
    if (running_.empty()) return;
    const std::vector<Sequence*> ready = grow_running();
    if (ready.empty()) return;
    BatchMeta meta;
    meta.block_size = kBlockSize;
    std::vector<Part> parts;
    // Streams whose prompt is done decode a row (plus drafts); the others prefill a chunk.
    std::vector<Sequence*> decoders, prefilling;
    bool could_draft = false;  // some decoding stream's request allows drafting
    for (Sequence* s : ready) {
      const bool decodes = int(s->tokens.size()) - s->computed == 1;
      (decodes ? decoders : prefilling).push_back(s);
      could_draft |= decodes && s->req.draft;
    }
    const int decoding = int(decoders.size());
    // What may draft this round (the guard's verdict for this many decoding streams): every source,
    // context copies alone (the model drafter is skipped), or nothing.
    const DraftSources sources = !drafting_                 ? DraftSources::None
                                 : !guard_ || decoding == 0 ? DraftSources::All
                                                            : guard_->sources(decoding);
    const bool drafts_ok = sources != DraftSources::None;
    const bool model_ok = drafter_ && sources == DraftSources::All;
    const bool drafted = plan_decode(meta, parts, decoders, !prefilling.empty(), drafts_ok, model_ok);
    round_prompt_rows_ = plan_prefill(meta, parts, prefilling);
    const bool decode_only = round_prompt_rows_ == 0;
    if (meta.rows() == 0) return;
    const LogitRows lr = logit_rows_of(parts);
    std::vector<float> logits;
    std::vector<int32_t> sampled;
    const auto t0 = std::chrono::steady_clock::now();
    // Hidden states travel only when a stream may draft from them next round (also the round before the
    // guard's drafted probe, so that the probe's first round drafts); a drafter the guard switched off, or
    // left out while context copies draft alone, costs nothing (the MTP head skips the positions it never
    // saw).
    bool want_hidden = drafter_ && drafter_->wants_hidden() &&
                       (model_ok || (guard_ && decoding > 0 && guard_->allows_model_next(decoding)));
    if (want_hidden)
      want_hidden = std::any_of(parts.begin(), parts.end(), [](const Part& p) { return p.seq->req.draft; });
    Tensor hidden;
    // Decode and verify rounds (no prompt rows) may replay a captured CUDA graph (--cuda-graphs).
    const bool graph = opt_.cuda_graphs && std::all_of(parts.begin(), parts.end(), [](const Part& p) {
                         return p.sampled && (p.rows == 1 || !p.drafts.empty());
                       });
    // A forward that captured a CUDA graph took milliseconds of capture on top: neither the cost models
    // nor the draft guard learn from it (verify rounds of new shapes would otherwise be charged to drafting).
    bool captured = false;
    Model::Outputs outputs;
    outputs.logits = lr.need_host ? &logits : nullptr;
    outputs.sampling = &lr.sampling;
    outputs.tokens = &sampled;
    outputs.hidden = want_hidden ? &hidden : nullptr;
    outputs.graph = graph;
    outputs.graph_captured = &captured;
    outputs.host_rows = &lr.host_rows;
    model_->forward(meta, pool_->layers(), lr.logit_rows, outputs);
    round_prompt_rows_ = 0;  // outputs are applied from here on: a failure now is not retried
    const double forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!captured) {
      cost_.observe(meta.rows(), forward_s);
      round_cost_.observe(meta.rows(), forward_s);
    }
    const Applied a = apply_parts(parts, logits, sampled, want_hidden ? &hidden : nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.forward_passes;
      stats_.forward_seconds += forward_s;
      const double round_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - round_t0).count();
      stats_.round_seconds += round_s;
      if (decode_only) {
        ++stats_.decode_rounds;
        stats_.decode_round_seconds += round_s;
        stats_.decode_forward_seconds += forward_s;
      }
      stats_.prompt_tokens += a.prompt_rows;
      for (Sequence* s : a.done) {
        if (drafter_) drafter_->release(*s);
        running_.remove_if([&](const std::unique_ptr<Sequence>& q) { return q.get() == s; });
      }
    }
    if (guard_)
      judge_round(round_t0, decoding, int(parts.size()), a.emitted, drafts_ok, could_draft, drafted,
                  a.started, captured);
  }

  // What a forward's outputs did to the round's parts: prompt logprobs scored, tokens verified and emitted,
  // finished streams collected, the hidden states handed to the drafter (`hidden`: when it wants them).
  struct Applied {
    std::vector<Sequence*> done;  // finished streams
    int64_t prompt_rows = 0;
    int emitted = 0;       // tokens of the decoding streams
    bool started = false;  // some stream sampled its first token
  };
  Applied apply_parts(const std::vector<Part>& parts, const std::vector<float>& logits,
                      const std::vector<int32_t>& sampled, const Tensor* hidden) {
    size_t next = 0;       // index of the part's first logit row
    size_t next_host = 0;  // ... and of its first host logits row, when it samples on the host
    Applied a;
    for (const auto& p : parts) {
      const bool prompt = p.seq->generated() == 0;
      if (prompt) a.prompt_rows += p.rows;
      const int base = p.seq->computed;
      bool finished = false;
      if (const auto [offset, scored] = prompt_scored(*p.seq, p.rows); scored > 0) {
        score_prompt(*p.seq, logits.data() + next_host * size_t(spec_.vocab), offset, scored);
        next_host += size_t(scored);
        next += size_t(scored);
      }
      if (!p.sampled) {
        p.seq->computed += p.rows;
      } else {
        const size_t n = size_t(p.drafts.empty() ? 1 : p.rows);
        const float* row_logits =
            host_sampled(*p.seq) ? logits.data() + next_host * size_t(spec_.vocab) : nullptr;
        if (row_logits) next_host += n;
        const size_t before = p.seq->tokens.size();
        finished = verify(*p.seq, row_logits, sampled.data() + next, p.rows, p.drafts, p.proposed);
        next += n;
        if (prompt)
          a.started = true;
        else
          a.emitted += int(p.seq->tokens.size() - before);
      }
      if (finished)
        a.done.push_back(p.seq);
      else if (hidden)
        drafter_->observe_hidden(*p.seq, base, *hidden, p.first, p.seq->computed - base);
    }
    return a;
  }

  // Prefill chunks after the decode rows, the prompts with the fewest tokens left first, as many rows as
  // the decode share leaves (round_cost.h).
  int plan_prefill(BatchMeta& meta, std::vector<Part>& parts, std::vector<Sequence*>& prefilling) {
    std::stable_sort(prefilling.begin(), prefilling.end(), [](Sequence* a, Sequence* b) {
      return int(a->tokens.size()) - a->computed < int(b->tokens.size()) - b->computed;
    });
    int budget = prefill_rows_for_share(round_cost_, meta.rows(), opt_.decode_share, opt_.prefill_chunk);
    int added = 0;
    for (Sequence* s : prefilling) {
      const int pending = int(s->tokens.size()) - s->computed;
      const int room = int(s->blocks.size()) * kBlockSize - s->computed;
      const int n = std::min({pending, budget, room});
      if (n <= 0) continue;
      budget -= n;
      added += n;
      add_rows(meta, parts, *s, n, {});
    }
    return added;
  }

  // The round's logit rows: a prefill part's last row, every row of a verify part, and prompt rows whose
  // logits give prompt logprobs. Rows whose request needs only the logits row, seed and position are
  // sampled on the device (the same token sample_token gives); host logits travel only for the rows that
  // need more (host_rows: indices into logit_rows).
  struct LogitRows {
    std::vector<int32_t> logit_rows, host_rows;
    std::vector<RowSampling> sampling;
    bool need_host = false;
  };
  LogitRows logit_rows_of(const std::vector<Part>& parts) const {
    LogitRows r;
    for (const auto& p : parts) {
      // Prompt rows whose logits give prompt logprobs (to the host, after the part's first rows).
      const auto [offset, scored] = prompt_scored(*p.seq, p.rows);
      for (int i = offset; i < offset + scored; ++i) {
        r.host_rows.push_back(int32_t(r.logit_rows.size()));
        r.logit_rows.push_back(p.first + i);
        r.sampling.push_back({0.f, p.seq->seed, int64_t(p.seq->computed) + i});  // the device token is unused
      }
      r.need_host |= scored > 0;
      if (!p.sampled) continue;
      const SamplingParams& sp = p.seq->req.sampling;
      const bool device = !host_sampled(*p.seq);
      r.need_host |= !device;
      const int n = p.drafts.empty() ? 1 : p.rows;
      if (!device)
        for (int i = 0; i < n; ++i) r.host_rows.push_back(int32_t(r.logit_rows.size()) + i);
      for (int i = 0; i < n; ++i) r.logit_rows.push_back(p.first + p.rows - n + i);
      for (int i = 0; i < n; ++i)
        r.sampling.push_back({device && sp.temperature > 0.f ? sp.temperature : 0.f, p.seq->seed,
                              int64_t(p.seq->tokens.size()) + i});
    }
    return r;
  }

  // Feeds the guard a round that decoded streams and did nothing else (a prefill chunk's time would
  // count against whichever side it fell on) and whose forward captured no CUDA graph. New streams tell it
  // the workload changed; the round that samples a stream's first token is not measured. `enabled`: the
  // guard allowed drafting this round (it is judged as drafting whether or not a stream proposed: such a
  // round still paid the hidden states for the MTP head and the drafter's host work); `could_draft`: some
  // decoding stream's request allows drafting (rounds of `draft: false` requests alone count as serial and
  // not toward the guard's backoffs); `proposed`: some stream proposed drafts.
  void judge_round(std::chrono::steady_clock::time_point t0, int decoding, int parts, int emitted,
                   bool enabled, bool could_draft, bool proposed, bool started, bool captured) {
    if (started) guard_->workload_changed();  // (its first token came from a prompt: not measured)
    if (started || captured || decoding == 0 || parts != decoding) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto change = guard_->observe(decoding, emitted, seconds, enabled, could_draft, proposed);
    if (!change) return;
    std::ostringstream m;
    m.precision(1);
    const std::string model = drafter_ ? drafter_->name() : "";
    const std::string sources = !drafter_ ? "context-copy" : !ngram_ ? model : model + " + context-copy";
    m << std::fixed << "draft guard: ";
    if (change->on && !change->model && drafter_ && ngram_)  // stepped down, or copies alone back on
      m << model << " off, context-copy drafting on";
    else
      m << sources << " drafting " << (change->on ? "on" : "off");
    m << " for rounds of " << change->streams << " stream(s): drafting-enabled rounds "
      << change->drafted_rate << " tok/s per stream, serial " << change->serial_rate
      << " tok/s per stream (wall time)";
    log_info(m.str());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.draft_guard_switches = guard_->switches();
    stats_.draft_guard_off = guard_->buckets_off();
  }

  void drop_cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    // Waiting requests whose client left give their queue place back at once, even while every stream
    // slot is busy (admission only looks at the queue when a slot is free).
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->queue->cancelled()) {
        finish(**it, FinishReason::Cancelled, {});
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->queue->cancelled()) {
        if (drafter_) drafter_->release(**it);
        finish(**it, FinishReason::Cancelled, {});
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void add_rows(BatchMeta& meta, std::vector<Part>& parts, Sequence& s, int n, std::vector<int32_t> drafts,
                int proposed = 0) {
    const int seq_index = int(meta.block_tables.size());
    meta.block_tables.push_back(s.blocks);
    const int first = meta.rows();
    for (int i = 0; i < n; ++i) {
      const int pos = s.computed + i;
      meta.tokens.push_back(i == 0 || drafts.empty() ? s.tokens[pos] : drafts[i - 1]);
      meta.positions.push_back(pos);
      meta.row_seq.push_back(seq_index);
      meta.slots.push_back(s.blocks[pos / kBlockSize] * kBlockSize + pos % kBlockSize);
    }
    const bool sampled = !drafts.empty() || s.computed + n == int(s.tokens.size());
    parts.push_back({&s, first, n, sampled, std::move(drafts), proposed});
  }

  // Decode rows for every stream whose prompt is done: its last token, plus drafts where they pay.
  // `prompts`: the round also carries prompt rows; `drafts_ok`: streams may draft (the guard's verdict);
  // `model_ok`: the model drafter may propose (else context copies alone). True when some stream proposed
  // drafts.
  bool plan_decode(BatchMeta& meta, std::vector<Part>& parts, const std::vector<Sequence*>& decoding,
                   bool prompts, bool drafts_ok, bool model_ok) {
    std::vector<std::vector<int32_t>> drafts(decoding.size());
    if (drafts_ok) propose(decoding, drafts, model_ok);
    std::vector<int> proposed(decoding.size());
    int longest = 0;
    for (size_t i = 0; i < decoding.size(); ++i) {
      proposed[i] = int(drafts[i].size());
      longest = std::max(longest, proposed[i]);
    }
    // Padding: every stream that may draft verifies the round's bucketed length (or what its room allows),
    // so that the round's rows per stream, and with them its CUDA graph key, recur. Not in rounds that
    // carry prompt rows: those run eagerly whatever their shape.
    if (longest > 0 && !prompts &&
        pad_drafts_now(pad_mode_, graphs_replayed(), round_cost_.predict(int(decoding.size())))) {
      const int k = padded_draft_length(longest, opt_.max_draft);
      for (size_t i = 0; i < decoding.size(); ++i)
        if (decoding[i]->req.draft)
          pad_proposal(drafts[i], std::min(k, draft_room(*decoding[i])), decoding[i]->tokens.back());
    }
    for (size_t i = 0; i < decoding.size(); ++i) {
      const int rows = 1 + int(drafts[i].size());
      add_rows(meta, parts, *decoding[i], rows, std::move(drafts[i]), proposed[i]);
    }
    return longest > 0;
  }

  bool graphs_replayed() const { return opt_.cuda_graphs && backend_->graphs_supported(); }

  // The longest proposal a stream may verify: its rows must stay within its reserved capacity.
  int draft_room(const Sequence& s) const {
    return std::max(0, std::min({s.req.max_tokens - s.generated() - 1, opt_.max_draft,
                                 int(s.blocks.size()) * kBlockSize - int(s.tokens.size())}));
  }

  // Each decoding stream's proposal (empty: it decodes serially), from the source whose expected rate is
  // higher: context copies cost nothing to propose, a model drafter costs its own forward. `model_ok`:
  // the model drafter may propose (the guard may allow context copies alone).
  void propose(const std::vector<Sequence*>& decoding, std::vector<std::vector<int32_t>>& drafts,
               bool model_ok) {
    model_ok = model_ok && drafter_ != nullptr;
    std::vector<DraftSlot> model_slots;
    const double c = cost_.row_cost_in_round(int(decoding.size()));
    for (size_t i = 0; i < decoding.size(); ++i) {
      Sequence& s = *decoding[i];
      if (!s.req.draft) continue;
      const int room = draft_room(s);
      // Each source keeps its own acceptance (of real proposals only: padding never reaches it).
      auto length = [&](DraftStats& st, double draft_cost) {
        return opt_.adaptive_draft ? choose_draft_length(st, c, room, draft_cost) : room;
      };
      if (ngram_) {
        int match = 0;
        const int kn = length(s.ngram_stats, 0);
        if (kn > 0) drafts[i] = ngram_->lookup(s.tokens, kn, &match);
        const bool prefer = !model_ok || match >= 3 || s.ngram_stats.acceptance >= s.model_stats.acceptance;
        if (!drafts[i].empty() && prefer) {
          s.last_draft_ngram = true;
          continue;
        }
        drafts[i].clear();
      }
      if (!model_ok) continue;
      const int km = length(s.model_stats, cost_.draft_cost_in_round(int(decoding.size())));
      if (km <= 0) continue;
      s.last_draft_ngram = false;
      model_slots.push_back({&s, km, {}});
    }
    if (model_slots.empty()) return;
    const auto t0 = std::chrono::steady_clock::now();
    drafter_->propose(model_slots);
    int proposed = 0;
    for (const auto& slot : model_slots) proposed += int(slot.tokens.size());
    cost_.observe_draft(proposed,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (auto& slot : model_slots) {
      size_t i = size_t(std::find(decoding.begin(), decoding.end(), slot.seq) - decoding.begin());
      drafts[i] = std::move(slot.tokens);
    }
  }

  // Samples the stream's next token(s) from its logit rows: row i's token is what serial decoding would
  // sample at that position; drafts are kept while they equal it. Emits one event. True when finished.
  // `device` holds each row's token sampled on the device; `logits` (host rows) is null when no row of the
  // round needed them, and is read only when the stream's sampling needs more than the device does.
  // `proposed`: drafts[0..proposed) were proposed, the rest are fillers (draft padding).
  bool verify(Sequence& s, const float* logits, const int32_t* device, int rows,
              const std::vector<int32_t>& drafts, int proposed) {
    const bool on_device = !host_sampled(s);
    std::vector<uint8_t> mask;    // the ids a row may sample (row_mask; empty: all)
    const int base = s.computed;  // position of the part's first row
    StreamEvent ev;
    ev.kind = StreamEvent::Kind::Tokens;
    if (s.prompt_logprobs_pending()) {
      ev.prompt_logprobs = std::move(s.prompt_lp);
      IncrementalDetokenizer detok(tokenizer_, s.req.skip_special_tokens);  // each token's share of the text
      detok.push(s.tokens[0]);
      for (auto& t : ev.prompt_logprobs) t.text = detok.push(t.token);
      s.prompt_lp_sent = true;
    }
    FinishReason reason = FinishReason::None;
    std::string matched;
    int accepted = 0;
    const int nrows = drafts.empty() ? 1 : rows;
    for (int i = 0; i < nrows; ++i) {
      const int64_t position = int64_t(s.tokens.size());
      SampleResult r;
      if (!on_device) row_mask(s, mask);
      if (on_device)
        r.token = device[i];
      else
        r = sample_token(logits + size_t(i) * spec_.vocab, spec_.vocab, s.req.sampling, s.seed, position,
                         s.penalties, s.req.logprobs, mask.empty() ? nullptr : mask.data());
      if (s.json)
        TF_CHECK(json_filter().advance(*s.json, r.token), "structured output: a masked token was sampled");
      const bool hit = i < int(drafts.size()) && r.token == drafts[i];
      GeneratedToken g = s.append(r, eos_, &reason, &matched);
      ev.text += g.text;
      ev.tokens.push_back(std::move(g));
      if (reason != FinishReason::None || !hit) break;
      ++accepted;
    }
    // K/V is valid for the rows whose inputs are now the stream's tokens.
    s.computed = drafts.empty() ? base + rows : base + 1 + accepted;
    // The adaptive statistics learn the drafter's acceptance: from its own proposals, not the fillers.
    // Usage counts every verified draft row (fillers too), so accepted <= drafted.
    record_proposal(s.last_draft_ngram ? s.ngram_stats : s.model_stats, proposed, accepted);
    if (!drafts.empty()) {
      s.usage.drafted_tokens += int(drafts.size());
      s.usage.accepted_tokens += accepted;
    }
    if (drafter_) drafter_->sync(s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.generated_tokens += int64_t(ev.tokens.size());
      stats_.drafted_tokens += int64_t(drafts.size());
      stats_.accepted_tokens += accepted;
    }
    s.queue->push(std::move(ev));
    if (reason == FinishReason::None) return false;
    std::lock_guard<std::mutex> lock(mu_);
    finish(s, reason, matched);
    return true;
  }

  // Sends the Finished event and frees the stream's blocks. Caller holds mu_.
  void finish(Sequence& s, FinishReason reason, const std::string& matched) {
    StreamEvent ev;
    ev.kind = StreamEvent::Kind::Finished;
    ev.finish = reason;
    ev.matched_stop = matched;
    ev.usage = s.usage;
    ev.usage.prompt_tokens = s.prompt_len;
    ev.usage.completion_tokens = s.generated();
    if (s.blocks.empty()) {
    } else if (reason == FinishReason::Error) {
      pool_->release(s.blocks);
    } else {
      prefix_cache_->retain(s.tokens, s.computed, s.blocks);
    }
    ++stats_.requests_finished;
    if (reason == FinishReason::Cancelled) ++stats_.requests_cancelled;
    s.queue->push(std::move(ev));
  }

  // A round whose forward ran out of device memory runs again with at most half its prompt rows, and
  // --prefill-chunk stays there. Nothing of the failed round was applied (tokens, positions, sampling and
  // drafting state are as before it) and the K/V rows it wrote are written again with the same bits, so
  // no stream changes. Decode-only rounds and chunks at kMinRetryRows fail their streams (fail_all).
  bool retry_with_fewer_prompt_rows(const std::string& what) {
    constexpr int kMinRetryRows = 16;
    if (round_prompt_rows_ <= kMinRetryRows) return false;
    const int before = opt_.prefill_chunk;
    opt_.prefill_chunk = std::max(kMinRetryRows, std::min(opt_.prefill_chunk, round_prompt_rows_) / 2);
    log_warning("a round of " + std::to_string(round_prompt_rows_) +
                " prompt rows ran out of device memory (" + what +
                "); running it again with --prefill-chunk " + std::to_string(opt_.prefill_chunk) + " (was " +
                std::to_string(before) + ")");
    return true;
  }

  void fail_all(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : running_) {
      if (drafter_) drafter_->release(*s);
      StreamEvent ev;
      ev.kind = StreamEvent::Kind::Error;
      ev.error = "internal error during generation: " + what;
      pool_->release(s->blocks);
      s->queue->push(std::move(ev));
    }
    running_.clear();
  }

  EngineOptions opt_;
  int context_ = 0;            // tokens a stream may hold (--context)
  int round_prompt_rows_ = 0;  // prompt rows of the round being run (retry_with_fewer_prompt_rows)
  Checkpoint ckpt_;
  ModelSpec spec_;
  Tokenizer tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unique_ptr<KvDiskStore> store_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::vector<int32_t> eos_;
  std::unique_ptr<JsonTokenFilter> json_filter_;  // json_filter()
  ModelInfo info_;
  std::unique_ptr<NgramDrafter> ngram_;
  std::unique_ptr<Drafter> drafter_;  // a model drafter (draft model), or null
  bool drafting_ = false;
  std::unique_ptr<DraftGuard> guard_;  // wall-clock check on drafting (null: off, or nothing drafts)
  CostModel cost_{0.5};
  RoundCostTable round_cost_;  // measured forward time per row count: the --decode-share budget
  int parallel_ = 1;
  PadDrafts pad_mode_ = PadDrafts::Auto;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::unique_ptr<Sequence>> waiting_, running_;
  bool stopping_ = false;
  EngineStats stats_;
  std::atomic<uint64_t> next_id_{1};
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Engine> create_engine(const EngineOptions& opt) {
  return std::make_unique<EngineImpl>(opt);
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TENSORFOLD_DEMO_DIR"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path cand :
         {exe.parent_path() / "../share/tensorfold/models/demo", exe.parent_path() / "../models/demo"})
      if (fs::exists(cand / "config.json")) return fs::weakly_canonical(cand).string();
  }
#ifdef TF_SOURCE_DEMO_DIR
  if (fs::exists(fs::path(TF_SOURCE_DEMO_DIR) / "config.json")) return TF_SOURCE_DEMO_DIR;
#endif
  return "";
}

}  // namespace tf
