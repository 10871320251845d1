#pragma once
// A stand-in engine and model text for the server tests: byte-level "tokens", a deterministic generator
// on its own thread per request (so it keeps running while nobody reads, like the real engine), stop
// strings with hold-back, logprobs, usage, and a prompt-cache stand-in (cached_tokens: the longest prefix
// shared with an earlier prompt, in whole blocks of 16, always leaving one token to compute). Lets the HTTP
// layer be tested without a model.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/model_text.h"

namespace tf::testing {

// Ids 0..255 are bytes; 256 is "<eos>", 257 is "<bos>".
class FakeText : public server::ModelText {
 public:
  static constexpr int32_t kEos = 256, kBos = 257;
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int vocab_size() const override { return 258; }
  bool has_chat_template() const override { return has_template; }
  // "<|role|>content\n" per message (tool calls as "call name(args)" with args dumped as JSON), then
  // "<|assistant|>" with add_generation_prompt, "/no_think" when kwargs.enable_thinking is false and
  // "<think>\n" when kwargs.open_think is true.
  std::string render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const override;
  bool has_template = true;
  // When set, render_chat throws std::runtime_error with this text (a template's raise_exception).
  std::string template_raises;
};

struct FakeEngineConfig {
  int context = 256;
  std::chrono::microseconds step{1000};  // time per generated token
  // A prompt containing this text ends with EOS after 12 tokens.
  std::string eos_trigger = "EOS";
  // When set, every reply is this text, one byte per token, then EOS (parsers see markers split at
  // every byte); after a prompt that closed the thinking block, the part after the reply's "</think>\n\n".
  std::string reply = "";
};

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(FakeEngineConfig cfg = {});
  ~FakeEngine() override;
  std::shared_ptr<RequestHandle> submit(GenerationRequest req) override;
  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override;  // not used by the server (it uses ModelText); throws
  const ChatTemplate* chat_template() const override { return nullptr; }
  void shutdown() override;
  EngineStats stats() const override;

  // The token the fake generates at `position` for `seed` (temperature 0 uses seed 0).
  static int32_t token_at(uint64_t seed, int position);

  std::atomic<int64_t> steps{0};                   // tokens generated, all requests
  std::atomic<int64_t> running{0};                 // generator threads still running
  std::atomic<int64_t> cancelled{0};               // requests cancelled before they finished
  GenerationRequest last_request;                  // the most recent submission (guarded by mu)
  std::vector<std::vector<int32_t>> seen_prompts;  // for a prompt cache stand-in (guarded by mu)
  std::mutex mu;

 private:
  FakeEngineConfig cfg_;
  ModelInfo info_;
  FakeText text_;
  std::vector<std::shared_ptr<RequestHandle>> handles_;
};

}  // namespace tf::testing
