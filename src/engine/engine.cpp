// The engine: owns the model, the KV block pool and the streams; runs rounds on its own thread. Each
// round puts decode rows of running streams and prefill chunks of new prompts into one forward.
#include "engine/engine.h"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/sequence.h"
#include "models/model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#ifndef TF_VERSION
#define TF_VERSION "0.1.0"
#endif

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
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
  if (want != "auto" && want != "cuda") throw Error("--backend must be auto, cuda or cpu (got '" + want + "')");
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
        tokenizer_(Tokenizer::load(opt.model_path)) {
    try {
      chat_template_ = std::make_unique<ChatTemplate>(ChatTemplate::from_dir(opt.model_path));
    } catch (const Error&) {
      chat_template_.reset();  // base models without a template still serve /v1/completions
    }
    backend_ = pick_backend(opt.backend);
    int context = opt.context > 0 ? opt.context : std::min(spec_.native_context, 32768);
    TF_CHECK(context >= 2, "--context must be at least 2");
    model_ = load_model(ckpt_, *backend_, context);
    parallel_ = std::max(1, opt.parallel);
    const int per_stream = KvBlockPool::blocks_for(context, kBlockSize);
    int blocks = per_stream * parallel_;
    const int64_t per_block = spec_.kv_bytes_per_token(dtype_size(backend_->act_dtype())) * kBlockSize;
    if (opt.kv_budget_bytes > 0) blocks = int(int64_t(opt.kv_budget_bytes) / per_block);
    if (blocks < per_stream)
      throw Error("the KV budget holds " + std::to_string(int64_t(blocks) * kBlockSize) + " tokens, less than one " +
                  "stream's --context " + std::to_string(context) + "; lower --context or raise the budget");
    pool_ = std::make_unique<KvBlockPool>(*backend_, spec_.layers, spec_.kv_heads, spec_.head_dim, kBlockSize, blocks);
    collect_eos();
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
    s.kv_blocks_used = pool_->used_blocks();
    s.kv_blocks_total = pool_->num_blocks();
    return s;
  }

  std::shared_ptr<RequestHandle> submit(GenerationRequest req) override {
    validate(req);
    auto q = std::make_shared<EventQueue>(next_id_++);
    q->set_waker([this] { cv_.notify_all(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      TF_CHECK(!stopping_, "the engine is shutting down");
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
    for (const auto& n : ckpt_.names())
      if (n.rfind("mtp.", 0) != 0) info_.parameters += ckpt_.info(n)->numel();
    info_.dtype = ckpt_.names().empty() ? "?" : dtype_name(ckpt_.info(ckpt_.names()[0])->dtype);
    for (auto& c : info_.dtype) c = char(std::tolower(c));
    info_.native_context = spec_.native_context;
    info_.context = context;
    info_.backend = backend_->name();
    info_.weight_bytes = ckpt_.total_bytes();
    info_.kv_bytes = pool_->bytes();
    uint64_t h = std::hash<std::string>{}(ckpt_.config().dump()) ^ (uint64_t(ckpt_.total_bytes()) * 0x9e3779b97f4a7c15ULL);
    info_.fingerprint = "tf-" TF_VERSION "-" + backend_->name().substr(0, backend_->name().find(' ')) + "-" + hex64(h);
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
                                 std::to_string(spec_.vocab - 1) + ")", "prompt");
    const int P = int(req.prompt.size()), C = info_.context;
    if (req.max_tokens <= 0) req.max_tokens = std::max(1, std::min(opt_.max_tokens, C - P));
    if (P + req.max_tokens > C)
      throw InvalidRequest("This model's maximum context length is " + std::to_string(C) + " tokens. However, you requested " +
                               std::to_string(P + req.max_tokens) + " tokens (" + std::to_string(P) + " in the prompt, " +
                               std::to_string(req.max_tokens) + " for the completion). Please reduce the prompt or max_tokens.",
                           "messages", "context_length_exceeded");
    if (req.sampling.temperature < 0) throw InvalidRequest("temperature must be >= 0", "temperature");
    if (req.sampling.top_p <= 0 || req.sampling.top_p > 1) throw InvalidRequest("top_p must be in (0, 1]", "top_p");
    if (req.sampling.top_k < 0) throw InvalidRequest("top_k must be >= 0", "top_k");
    if (req.sampling.min_p < 0 || req.sampling.min_p > 1) throw InvalidRequest("min_p must be in [0, 1]", "min_p");
    if (req.sampling.repetition_penalty <= 0) throw InvalidRequest("repetition_penalty must be > 0", "repetition_penalty");
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
        fail_all(e.what());
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* list : {&running_, &waiting_})
      for (auto& s : *list) finish(*s, FinishReason::Cancelled, {});
    running_.clear();
    waiting_.clear();
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
      if (!pool_->reserve(s.blocks, s.prompt_len + s.req.max_tokens)) break;
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
    }
  }

  void round() {
    // Drop cancelled streams first.
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->queue->cancelled()) {
          finish(**it, FinishReason::Cancelled, {});
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (running_.empty()) return;
    BatchMeta meta;
    meta.block_size = kBlockSize;
    struct Part { Sequence* seq; int rows; bool logits; };
    std::vector<Part> parts;
    int budget = std::max(1, opt_.prefill_chunk);
    auto add = [&](Sequence& s, int n) {
      const int seq_index = int(meta.block_tables.size());
      meta.block_tables.push_back(s.blocks);
      for (int i = 0; i < n; ++i) {
        const int pos = s.computed + i;
        meta.tokens.push_back(s.tokens[pos]);
        meta.positions.push_back(pos);
        meta.row_seq.push_back(seq_index);
        meta.slots.push_back(s.blocks[pos / kBlockSize] * kBlockSize + pos % kBlockSize);
      }
      parts.push_back({&s, n, s.computed + n == int(s.tokens.size())});
    };
    for (auto& s : running_)  // decode rows first: running replies keep moving
      if (int(s->tokens.size()) - s->computed == 1) add(*s, 1);
    for (auto& s : running_) {
      const int pending = int(s->tokens.size()) - s->computed;
      if (pending > 1 && budget > 0) {
        const int n = std::min(pending, budget);
        budget -= n;
        add(*s, n);
      }
    }
    std::vector<int32_t> logit_rows;
    int row = 0;
    for (const auto& p : parts) {
      row += p.rows;
      if (p.logits) logit_rows.push_back(row - 1);
    }
    std::vector<float> logits;
    model_->forward(meta, pool_->layers(), logit_rows, logits);
    int li = 0;
    std::vector<Sequence*> done;
    for (const auto& p : parts) {
      p.seq->computed += p.rows;
      if (!p.logits) continue;
      if (step(*p.seq, logits.data() + size_t(li++) * spec_.vocab)) done.push_back(p.seq);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.forward_passes;
    for (const auto& p : parts)
      if (p.seq->generated() == 0) stats_.prompt_tokens += p.rows;
    if (!done.empty()) {
      running_.remove_if([&](const std::unique_ptr<Sequence>& s) {
        return std::find(done.begin(), done.end(), s.get()) != done.end();
      });
    }
  }

  // Samples one token for `s`; emits its event. Returns true when the stream finished (and was released).
  bool step(Sequence& s, const float* row) {
    const int64_t position = int64_t(s.tokens.size());
    SampleResult r = sample_token(row, spec_.vocab, s.req.sampling, s.seed, position, s.penalties, s.req.logprobs);
    s.tokens.push_back(r.token);
    s.penalties.add_generated(r.token);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.generated_tokens;
    }
    GeneratedToken g;
    g.token = r.token;
    g.logprob = r.logprob;
    g.top = std::move(r.top);
    const bool is_eos = (!s.req.ignore_eos && std::find(eos_.begin(), eos_.end(), r.token) != eos_.end()) ||
                        std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), r.token) !=
                            s.req.stop_token_ids.end();
    FinishReason reason = FinishReason::None;
    std::string matched;
    if (is_eos) {
      g.text = s.stop.push(s.detok.flush(), &matched) + s.stop.flush();
      reason = FinishReason::Stop;
    } else {
      g.text = s.stop.push(s.detok.push(r.token), &matched);
      if (!matched.empty()) {
        reason = FinishReason::Stop;
        if (s.req.include_stop_str_in_output) g.text += matched;
      } else if (s.generated() >= s.req.max_tokens) {
        g.text += s.stop.push(s.detok.flush(), &matched);
        if (matched.empty()) g.text += s.stop.flush();
        reason = FinishReason::Length;
      }
    }
    StreamEvent ev;
    ev.kind = StreamEvent::Kind::Tokens;
    ev.text = g.text;
    ev.tokens.push_back(std::move(g));
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
    ev.usage.prompt_tokens = s.prompt_len;
    ev.usage.completion_tokens = s.generated();
    pool_->release(s.blocks);
    ++stats_.requests_finished;
    if (reason == FinishReason::Cancelled) ++stats_.requests_cancelled;
    s.queue->push(std::move(ev));
  }

  void fail_all(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : running_) {
      StreamEvent ev;
      ev.kind = StreamEvent::Kind::Error;
      ev.error = "internal error during generation: " + what;
      pool_->release(s->blocks);
      s->queue->push(std::move(ev));
    }
    running_.clear();
  }

  EngineOptions opt_;
  Checkpoint ckpt_;
  ModelSpec spec_;
  Tokenizer tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvBlockPool> pool_;
  std::vector<int32_t> eos_;
  ModelInfo info_;
  int parallel_ = 1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::unique_ptr<Sequence>> waiting_, running_;
  bool stopping_ = false;
  EngineStats stats_;
  std::atomic<uint64_t> next_id_{1};
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Engine> create_engine(const EngineOptions& opt) { return std::make_unique<EngineImpl>(opt); }

std::string default_model_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TENSORFOLD_DEMO_DIR"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path cand : {exe.parent_path() / "../share/tensorfold/models/demo", exe.parent_path() / "../models/demo"})
      if (fs::exists(cand / "config.json")) return fs::weakly_canonical(cand).string();
  }
#ifdef TF_SOURCE_DEMO_DIR
  if (fs::exists(fs::path(TF_SOURCE_DEMO_DIR) / "config.json")) return TF_SOURCE_DEMO_DIR;
#endif
  return "";
}

}  // namespace tf
