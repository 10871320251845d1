// Qwen3 dense (Qwen3ForCausalLM): Llama-style decoder with RMSNorm on q and k per head, no QKV bias by
// default, optional MTP head tensors (mtp.*) that the drafting engine reads and this family ignores.
#include "core/error.h"
#include "models/dense_decoder.h"

namespace tf {

Family qwen3_family() {
  Family f;
  f.model_type = "qwen3";
  f.description = "Qwen3 dense (q/k norm, GQA); also the embedded demo model";
  f.parse = [](const nlohmann::json& c) {
    ModelSpec s = parse_dense_spec(c);
    s.qk_norm = true;
    if (config_util::get_bool(c, "use_sliding_window", false))
      throw Error("qwen3: use_sliding_window=true is not supported yet");
    return s;
  };
  f.load = [](const Checkpoint& ckpt, Backend& be, const ModelSpec& s, int context) {
    return load_dense_decoder(ckpt, be, s, context);
  };
  return f;
}

}  // namespace tf
