#pragma once
// Decoders of tokenizer.json ("decoder"): ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace,
// Sequence (no decoder: tokens joined by spaces), plus transformers' clean_up_tokenization.
//
// Every decoder is implemented as a stream: tokens are pushed one at a time and text comes out as soon
// as no later token can change it (incomplete UTF-8 and open byte-fallback groups are held back).
// The full decode is the same stream run over all tokens, so streaming output concatenates to exactly
// the full decode by construction.
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tf::tok {

struct DecodeStep {
  virtual ~DecodeStep() = default;
  virtual void push(std::string piece, std::vector<std::string>& out) = 0;
  virtual void flush(std::vector<std::string>& /*out*/) {}
};

class Decoder {
 public:
  // cfg: the "decoder" JSON (null allowed). cleanup: apply transformers' clean_up_tokenization.
  Decoder(const nlohmann::json& cfg, bool cleanup);

  class Stream {
   public:
    std::string push(std::string_view token);
    std::string flush();

   private:
    friend class Decoder;
    void run(size_t from, std::vector<std::string> pieces, bool flushing, std::string& text);
    std::vector<std::unique_ptr<DecodeStep>> steps_;
  };
  Stream stream() const;
  std::string decode(const std::vector<std::string_view>& tokens) const;
  // The bytes one vocabulary piece contributes in the middle of a text (structured outputs match tokens
  // byte by byte): the ByteLevel alphabet mapped back to bytes (partial UTF-8 included), a <0xXX>
  // byte-fallback piece as its byte, Replace and Metaspace applied. Strip, Metaspace's first-token rule and
  // clean-up act only at the edges of a whole text and are left out.
  std::string token_bytes(std::string_view piece) const;

 private:
  using Factory = std::function<std::unique_ptr<DecodeStep>()>;
  void add(const nlohmann::json& cfg, bool& fused);
  std::vector<Factory> factories_;
  std::vector<std::function<std::string(std::string)>> byte_maps_;  // token_bytes(), in decoder order
};

}  // namespace tf::tok
