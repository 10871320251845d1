#include "models/dense_decoder.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/log.h"
#include "models/decoder_layer.h"
#include "models/weights.h"

namespace tf {

void Model::forward_mtp(const BatchMeta&, KvLayer&, const Tensor&, const std::vector<int32_t>&,
                        std::vector<float>&, Tensor*) {
  throw Error(spec().family + ": this checkpoint has no MTP head");
}

namespace {

// Column halves of fc.weight [H, 2H]: the embedding half and the hidden half, so the head needs no concat.
std::pair<Tensor, Tensor> split_columns(const Tensor& w) {
  const int64_t rows = w.dim(0), half = w.dim(1) / 2;
  const size_t es = dtype_size(w.dtype()), row_bytes = size_t(half) * es;
  Tensor a = Tensor::empty({rows, half}, w.dtype()), b = Tensor::empty({rows, half}, w.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    const char* src = static_cast<const char*>(w.raw()) + size_t(r) * 2 * row_bytes;
    std::memcpy(static_cast<char*>(a.raw()) + size_t(r) * row_bytes, src, row_bytes);
    std::memcpy(static_cast<char*>(b.raw()) + size_t(r) * row_bytes, src + row_bytes, row_bytes);
  }
  return {a, b};
}

// Qwen3-Next / DeepSeek-style MTP head: fc(concat(norm_e(embed(token[p+1])), norm_h(h[p]))) -> one decoder
// layer -> norm -> the model's lm_head.
struct MtpWeights {
  Tensor norm_embedding, norm_hidden, norm;
  LinearWeight fc_embedding, fc_hidden;
  DecoderLayer layer;
};

// Decode and verify forwards replayed from CUDA graphs (Backend::run_graph) need fixed addresses: one
// workspace for up to `rows` rows, with the gathered states and logits, serves every graph of at most that
// many rows (graphs run one after another on the backend's stream, each writing before it reads).
struct GraphBuffers {
  LayerWorkspace ws;
  Tensor picked, logits;
  GraphBuffers(Backend& be, const ModelSpec& s, int64_t rows)
      : ws(be, s, rows),
        picked(be.alloc({rows, int64_t(s.hidden)}, be.act_dtype())),
        logits(be.alloc({rows, int64_t(s.vocab)}, DType::F32)) {}
};

// Batches larger than this run eagerly: launches matter less there, and the graph buffers (~0.7 MB a row
// at the Qwen3-8B shape, mostly the f32 logits) grow with the largest graphed batch.
constexpr int64_t kMaxGraphRows = 256;

class DenseDecoder final : public Model {
 public:
  DenseDecoder(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, int context,
               const DenseWeightNames& names)
      : be_(be), spec_(spec) {
    const int64_t H = spec.hidden, V = spec.vocab;
    const std::string& p = names.prefix;
    embed_ = load_embedding(ckpt, be, p + "embed_tokens", V, H);
    final_norm_ = be.upload(fetch_tensor(ckpt, p + "norm.weight", {H}));
    for (int l = 0; l < spec.layers; ++l)
      layers_.push_back(
          load_decoder_layer(ckpt, be, spec, p + "layers." + std::to_string(l) + ".", spec.is_sparse(l)));
    lm_head_ = load_linear(ckpt, be, spec.tie_embeddings ? p + "embed_tokens" : "lm_head", V, H, false);
    rope_ = make_rope(spec.rope, context);
    attn_ = attention_params(spec);
    if (spec.mtp_layers > 0 && ckpt.has("mtp.fc.weight")) load_mtp(ckpt);
    // MoE layers: graphed where the backend's MoE never syncs on the host.
    for (const DecoderLayer& L : layers_)
      if (L.moe) graphs_ok_ &= be.moe_graph_safe(*L.moe, H);
    if (graphs_ok_) prepare_step();
  }
  ~DenseDecoder() override { be_.clear_graphs(); }  // graphs point at this model's weights

  const ModelSpec& spec() const override { return spec_; }
  bool has_mtp() const override { return mtp_ != nullptr; }

  using Model::forward;
  void forward(const BatchMeta& meta, std::vector<KvLayer>& kv, const std::vector<int32_t>& logit_rows,
               const Outputs& out) override {
    const int64_t R = meta.rows();
    if (out.logits) out.logits->clear();
    if (out.tokens) out.tokens->clear();
    if (out.graph_captured) *out.graph_captured = false;
    if (R == 0) return;
    if (out.graph && graphs_ok_ && ran_eager_ && R <= kMaxGraphRows && int64_t(logit_rows.size()) <= R &&
        be_.graphs_supported())
      return forward_graph(meta, kv, logit_rows, out);
    const bool warm = ran_eager_;  // the first forward runs the chain (one-time uploads)
    ran_eager_ = true;
    be_.begin_forward(meta);
    if (warm && take_step(R, logit_rows, out, kv)) {
      Tensor logits = be_.alloc({1, int64_t(spec_.vocab)}, DType::F32);  // the whole step, one launch
      be_.decode_step(step_.get(), logits);
      return read_back(Tensor(), 1, &logits, out);
    }
    LayerWorkspace ws(be_, spec_, R);
    run_stack(kv, ws);
    finish(ws.h, logit_rows, out);
  }

  void forward_mtp(const BatchMeta& meta, KvLayer& kv, const Tensor& hidden_in,
                   const std::vector<int32_t>& logit_rows, std::vector<float>& logits,
                   Tensor* hidden_out) override {
    TF_CHECK(mtp_, spec_.family + ": this checkpoint has no MTP head");
    const int64_t R = meta.rows();
    logits.clear();
    if (R == 0) return;
    TF_CHECK(hidden_in.dim(0) == R && hidden_in.dim(1) == spec_.hidden,
             "forward_mtp: hidden_in must be [rows, hidden]");
    be_.begin_forward(meta);
    LayerWorkspace ws(be_, spec_, R);
    const float eps = spec_.norm_eps, off = spec_.norm_offset;
    Tensor hin = be_.upload(hidden_in);
    be_.embedding(embed_, spec_.embed_scale, ws.h);
    be_.rms_norm(ws.h, mtp_->norm_embedding, eps, off, ws.h);
    be_.rms_norm(hin, mtp_->norm_hidden, eps, off, hin);
    be_.linear(ws.h, mtp_->fc_embedding, ws.residual);
    be_.linear(hin, mtp_->fc_hidden, ws.mlp_out);
    be_.add(ws.residual, ws.mlp_out);
    decoder_layer_forward(be_, spec_, mtp_->layer, rope_, attn_, kv, ws, false);
    be_.add(ws.residual, ws.mlp_out);
    be_.rms_norm(ws.residual, mtp_->norm, eps, off, ws.h);
    finish(ws.h, logit_rows, Outputs{&logits, nullptr, nullptr, hidden_out});
  }

 private:
  void load_mtp(const Checkpoint& ckpt) {
    const int64_t H = spec_.hidden;
    auto m = std::make_unique<MtpWeights>();
    m->norm_embedding = be_.upload(fetch_tensor(ckpt, "mtp.pre_fc_norm_embedding.weight", {H}));
    m->norm_hidden = be_.upload(fetch_tensor(ckpt, "mtp.pre_fc_norm_hidden.weight", {H}));
    m->norm = be_.upload(fetch_tensor(ckpt, "mtp.norm.weight", {H}));
    auto [we, wh] = split_columns(fetch_tensor(ckpt, "mtp.fc.weight", {H, 2 * H}));
    for (auto* lw : {&m->fc_embedding, &m->fc_hidden}) {
      lw->in_features = H;
      lw->out_features = H;
    }
    m->fc_embedding.weight = we;
    m->fc_hidden.weight = wh;
    m->fc_embedding = be_.upload_linear(m->fc_embedding);
    m->fc_hidden = be_.upload_linear(m->fc_hidden);
    m->layer = load_decoder_layer(ckpt, be_, spec_, "mtp.layers.0.");
    mtp_ = std::move(m);
  }

  // The batch's tokens through the embedding, every layer and the final norm: the final states in ws.h.
  void run_stack(std::vector<KvLayer>& kv, LayerWorkspace& ws) {
    be_.embedding(embed_, spec_.embed_scale, ws.residual);
    for (int l = 0; l < spec_.layers; ++l)
      decoder_layer_forward(be_, spec_, layers_[l], rope_, attn_, kv[l], ws, l > 0);
    be_.add(ws.residual, ws.mlp_out);
    be_.rms_norm(ws.residual, final_norm_, spec_.norm_eps, spec_.norm_offset, ws.h);
  }

  // The one-launch decode step (Backend::prepare_decode_step), where the backend has one for this model: it
  // takes one-row rounds that want only the row's logits (no hidden states: the MTP head's rounds run the
  // chain), with the chain's bits.
  void prepare_step() {
    DecodeStepModel m;
    m.embed = &embed_;
    m.embed_scale = spec_.embed_scale;
    for (const DecoderLayer& L : layers_) {
      if (L.qkv.out_features == 0) return;  // separate q, k, v: no fused projection for the kernel
      m.layers.push_back({&L.input_norm, &L.post_norm, spec_.qk_norm ? &L.q_norm : nullptr,
                          spec_.qk_norm ? &L.k_norm : nullptr, &L.qkv, &L.o, L.moe ? nullptr : &L.gate_up,
                          L.moe ? nullptr : &L.down, L.moe.get()});
    }
    m.final_norm = &final_norm_;
    m.lm_head = &lm_head_;
    m.rope = rope_;
    m.attn = attn_;
    m.norm_eps = spec_.norm_eps;
    m.norm_offset = spec_.norm_offset;
    std::string why;
    step_ = be_.prepare_decode_step(m, &why);
    log_message(step_ ? LogLevel::Info : LogLevel::Debug, spec_.family + ": " + why);
  }
  // Whether this forward (begin_forward done) runs as the step: one row, its logits wanted, no hidden
  // states, and the backend takes the round (bind_decode_step: context, pools).
  bool take_step(int64_t rows, const std::vector<int32_t>& logit_rows, const Outputs& o,
                 const std::vector<KvLayer>& kv) {
    return step_ && rows == 1 && logit_rows.size() == 1 && !o.hidden && (o.logits || o.tokens) &&
           be_.bind_decode_step(step_.get(), kv);
  }

  // forward() as a captured graph: the same ops on fixed buffers, recorded once its shape recurs (eager
  // before that: Backend::run_graph) and replayed after that; the host reads (hidden states, sampling,
  // logits) run after the replay.
  void forward_graph(const BatchMeta& meta, std::vector<KvLayer>& kv, const std::vector<int32_t>& logit_rows,
                     const Outputs& o) {
    const int64_t R = meta.rows(), n = int64_t(logit_rows.size());
    const bool heads = n > 0 && (o.logits || o.tokens);
    be_.begin_forward(meta);
    const bool step = take_step(R, logit_rows, o, kv);
    if (!graph_buffers_ || graph_buffers_->ws.residual.dim(0) < R) {
      int64_t cap = 8;
      while (cap < R) cap *= 2;
      graph_buffers_ = std::make_shared<GraphBuffers>(be_, spec_, cap);  // graphs keep the old ones
    }
    std::shared_ptr<GraphBuffers> buf = graph_buffers_;
    // Everything the recorded launches depend on besides begin_forward's metadata and the attention tiles
    // (the backend refreshes those and adds its own part): the row count, the table count (metadata
    // layout), the gathered rows, and the addresses of the buffers and the KV pool. Not the rows'
    // sequences: verify rounds of different draft widths with as many rows share a graph.
    std::vector<int64_t> key = {R, int64_t(meta.block_tables.size()), heads ? n : -1,
                                int64_t(reinterpret_cast<uintptr_t>(buf.get())), int64_t(step)};
    if (heads) key.insert(key.end(), logit_rows.begin(), logit_rows.end());
    for (const KvLayer& l : kv) {
      key.push_back(int64_t(reinterpret_cast<uintptr_t>(l.k.raw())));
      key.push_back(int64_t(reinterpret_cast<uintptr_t>(l.v.raw())));
    }
    LayerWorkspace ws(buf->ws, spec_, R);
    const Tensor h = ws.h;  // layers swap ws.residual and residual_alt, never h
    Tensor picked, logits;
    if (heads) {
      picked = buf->picked.slice_rows(0, n);
      logits = buf->logits.slice_rows(0, n);
    }
    const bool captured = be_.run_graph(key, attn_, buf, [&] {
      if (step) return be_.decode_step(step_.get(), logits);
      run_stack(kv, ws);
      if (heads) {
        be_.gather_rows(ws.h, logit_rows, picked);
        be_.linear(picked, lm_head_, logits);
      }
    });
    if (o.graph_captured) *o.graph_captured = captured;
    read_back(h, n, heads ? &logits : nullptr, o);
  }

  // Final states -> the requested rows' logits (host f32) and/or device-sampled tokens and, optionally,
  // all states to the host.
  void finish(const Tensor& h, const std::vector<int32_t>& logit_rows, const Outputs& o) {
    const int64_t n = int64_t(logit_rows.size());
    if (n == 0 || (!o.logits && !o.tokens)) return read_back(h, n, nullptr, o);
    Tensor picked = be_.alloc({n, int64_t(spec_.hidden)}, be_.act_dtype());
    Tensor out = be_.alloc({n, int64_t(spec_.vocab)}, DType::F32);
    be_.gather_rows(h, logit_rows, picked);
    be_.linear(picked, lm_head_, out);
    read_back(h, n, &out, o);
  }

  // The host side of finish: hidden states, device sampling of `out` (the n logit rows) and host logits.
  // The hidden states are queued behind the forward and land with the first wait for the device (the
  // sampled tokens' or the logits' copy, or the closing synchronize): one wait a round, not two.
  void read_back(const Tensor& h, int64_t n, const Tensor* out_logits, const Outputs& o) {
    if (o.hidden) {
      *o.hidden = Tensor::empty(h.shape(), be_.act_dtype());
      be_.to_host_queued(h, *o.hidden);
    }
    const bool some = o.host_rows && int64_t(o.host_rows->size()) < n;  // only some rows to the host
    const int64_t to_copy = some ? int64_t(o.host_rows->size()) : n;
    if (o.logits) o.logits->resize(size_t(to_copy * spec_.vocab));
    if (out_logits) read_logits(*out_logits, n, some, to_copy, o);
    if (o.hidden) be_.synchronize();  // idle by now when the logits were read: delivers the states
  }

  void read_logits(const Tensor& out, int64_t n, bool some, int64_t to_copy, const Outputs& o) {
    if (o.tokens) {
      TF_CHECK(o.sampling && int64_t(o.sampling->size()) == n, "forward: one RowSampling per logit row");
      be_.sample_rows(out, *o.sampling, *o.tokens);
    }
    if (o.logits && to_copy > 0) {
      Tensor host =
          Tensor::borrow(o.logits->data(), {to_copy, int64_t(spec_.vocab)}, DType::F32, Device::CPU);
      if (some) {
        Tensor picked = be_.alloc({to_copy, int64_t(spec_.vocab)}, DType::F32);
        be_.gather_rows(out, *o.host_rows, picked);
        be_.to_host(picked, host);
      } else {
        be_.to_host(out, host);
      }
    }
  }

  Backend& be_;
  ModelSpec spec_;
  Tensor embed_, final_norm_;
  std::vector<DecoderLayer> layers_;
  LinearWeight lm_head_;
  RopeParams rope_;
  AttentionParams attn_;
  std::unique_ptr<MtpWeights> mtp_;
  bool graphs_ok_ = true;   // no MoE layer whose routing syncs on the host
  bool ran_eager_ = false;  // the first forward is eager: one-time uploads (rope tables) cannot be captured
  std::shared_ptr<GraphBuffers> graph_buffers_;  // forward_graph's fixed buffers (grown by doubling)
  std::shared_ptr<void> step_;                   // the backend's one-launch decode step, or null
};

}  // namespace

std::unique_ptr<Model> load_dense_decoder(const Checkpoint& ckpt, Backend& backend, const ModelSpec& spec,
                                          int context, const DenseWeightNames& names) {
  return std::make_unique<DenseDecoder>(ckpt, backend, spec, context, names);
}

ModelSpec parse_dense_spec(const nlohmann::json& c) {
  using namespace config_util;
  ModelSpec s;
  s.family = c.value("model_type", "");
  s.hidden = get_int(c, "hidden_size");
  s.layers = get_int(c, "num_hidden_layers");
  s.heads = get_int(c, "num_attention_heads");
  s.kv_heads = get_int(c, "num_key_value_heads", s.heads);
  TF_CHECK(s.hidden > 0 && s.layers > 0 && s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0,
           "config.json: inconsistent sizes (hidden_size, num_hidden_layers, num_attention_heads, "
           "num_key_value_heads)");
  s.head_dim =
      c.contains("head_dim") && !c["head_dim"].is_null() ? get_int(c, "head_dim") : s.hidden / s.heads;
  s.intermediate = get_int(c, "intermediate_size");
  s.vocab = get_int(c, "vocab_size");
  s.native_context = get_int(c, "max_position_embeddings", 2048);
  s.norm_eps = get_float(c, "rms_norm_eps", 1e-6f);
  s.tie_embeddings = get_bool(c, "tie_word_embeddings", false);
  s.attention_bias = get_bool(c, "attention_bias", false);
  s.mlp_bias = get_bool(c, "mlp_bias", false);
  std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu") throw Error("config.json: hidden_act '" + act + "' is not supported (only silu)");
  s.rope = rope_config(c, s.head_dim);
  s.eos_ids = get_ids(c, "eos_token_id");
  auto bos = get_ids(c, "bos_token_id");
  if (!bos.empty()) s.bos_id = bos[0];
  s.mtp_layers = get_int(c, "mtp_num_hidden_layers", get_int(c, "num_nextn_predict_layers", 0));
  return s;
}

}  // namespace tf
