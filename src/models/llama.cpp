// Llama 2/3 and Mistral-style checkpoints (LlamaForCausalLM): GQA, RoPE with linear/dynamic/llama3/yarn
// scaling, optional attention bias, tied or untied embeddings.
#include "core/error.h"
#include "models/dense_decoder.h"

namespace tf {

Family llama_family() {
  Family f;
  f.model_type = "llama";
  f.description = "Llama 2/3, Mistral-style dense (GQA, RoPE scaling)";
  f.parse = [](const nlohmann::json& c) {
    ModelSpec s = parse_dense_spec(c);
    s.qk_norm = false;
    return s;
  };
  f.load = [](const Checkpoint& ckpt, Backend& be, const ModelSpec& s, int context) {
    return load_dense_decoder(ckpt, be, s, context);
  };
  return f;
}

}  // namespace tf
