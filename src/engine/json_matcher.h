#pragma once
// Structured outputs: a byte-level incremental matcher for one JSON document valid under a JSON Schema
// (the subset below). The token-mask builder walks the vocabulary with copies of a JsonMatcher, so a
// matcher is one flat vector of small frames and a copy is one allocation.
//
// Supported subset (anything else throws InvalidRequest naming the keyword and its JSON pointer):
//  - type (string, number, integer, boolean, null, object, array, or an array of these); nullable: true.
//    Without `type`, the type is inferred from the keywords present (properties/required/
//    additionalProperties: object; items/prefixItems/minItems/maxItems: array; minLength/maxLength/
//    pattern: string); with none of them any JSON value is allowed.
//  - properties, required, additionalProperties (false, true or a schema). ABSENT additionalProperties
//    means false when "properties" is given (OpenAI strict mode: exactly the listed properties), any
//    extra keys when it is not ({"type":"object"} is any object). Properties come in the schema's order (the
//    iteration order of the json passed to compile(): parse requests with nlohmann::ordered_json to keep the
//    user's order, nlohmann::json sorts keys); optional ones may be skipped, required ones may not.
//    Extra keys (additionalProperties true or a schema) may follow the listed ones once no required
//    property is left; they may not be listed names. At most 64 properties per object.
//  - items (schema or false), prefixItems, minItems, maxItems; minLength, maxLength (code points).
//  - pattern (strings), exactly: ECMA-262 search semantics (a match anywhere unless ^ / $ anchor it) over
//    the string's decoded value (an escape counts as the code point it spells), for the regex subset of
//    engine/byte_regex.h (compiled to a byte DFA, at most ByteRegex::kMaxStates states). A byte is
//    accepted only while the string can still be completed to a match (raw UTF-8 and escapes alike, a
//    \uXXXX escape digit by digit). With minLength/maxLength too, both hold exactly together (each DFA
//    state knows the lengths of its completions to a match); refused when both bounds are given and
//    maxLength exceeds 4096, or the (states x bound) search is too large. Refused beside enum/const.
//  - enum and const: scalar values match their compact serialization exactly (nlohmann dump()); object
//    and array values are matched structurally (whitespace between tokens allowed, keys in dump order).
//  - anyOf; oneOf is treated as anyOf (the alternatives are not checked for exclusivity); allOf with a
//    single subschema; $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed, nesting
//    of objects/arrays bounded to kMaxDepth levels).
//  - One of enum/const/anyOf/oneOf/allOf/$ref per schema object, beside annotations and nullable (and
//    `type` beside enum/const: it filters the values); other combinations are refused.
//  - format is accepted and NOT enforced; title, description, default, examples, $schema, $id,
//    $comment, deprecated, readOnly, writeOnly, discriminator (OpenAPI), $defs, definitions are
//    annotations.
//  - Keys are matched byte by byte against the names' compact serialization (an escaped spelling of a
//    listed name is not recognised as that name).
//  - Paths into parts of the schema that no finite document satisfies (a required property that
//    requires itself) are cut at compile time, so every prefix the matcher accepts can be completed
//    (up to kMaxDepth nesting); a schema with no finite document at all is refused. A pattern no string
//    matches removes the string type. Not enforced:
//    format, oneOf exclusivity; keys are not checked for duplicates among additional properties.
// Whitespace: between tokens only, one run of either a single space or a newline followed by at most
// kMaxIndent spaces or tabs (room for pretty-printing, none for a model that would rather emit blank
// lines or spaces forever: run 1 of the demo model spent its whole reply on them); none before or after
// the top-level value. Strings are valid UTF-8 (no overlongs, no surrogates, no lone
// surrogate escapes), no raw control characters. `integer` values have no fraction and no exponent.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class ByteRegex;  // engine/byte_regex.h

namespace json_schema_detail {
struct Node;
}

// A compiled JSON Schema, immutable and shareable across streams.
class JsonSchema {
 public:
  static constexpr int kMaxDepth = 32;      // nested objects/arrays in one document
  static constexpr int kMaxIndent = 20;     // spaces or tabs after the newline of one whitespace run
  static constexpr size_t kMaxStacks = 64;  // alternatives kept alive at once (pathological anyOf)

  // Throws tf::InvalidRequest with the keyword and JSON pointer of anything outside the subset.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::json& schema);
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema);
  static std::shared_ptr<const JsonSchema> any_object();  // response_format json_object
  static std::shared_ptr<const JsonSchema> any_value();   // the empty schema {}
  // The document, then exactly `suffix`, then nothing (a forced tool call: the arguments object, then the
  // call's closing marker). The suffix starts at the first byte the complete document cannot take.
  static std::shared_ptr<const JsonSchema> with_suffix(const std::shared_ptr<const JsonSchema>& base,
                                                       std::string suffix);
  const std::string& suffix() const { return suffix_; }
  // Not JSON: the reply is free text that the regex matches whole (vLLM's guided_regex), or exactly one
  // of `choices` (guided_choice; a regex of the escaped literals). Throws InvalidRequest as ByteRegex does.
  static std::shared_ptr<const JsonSchema> text_regex(std::string_view pattern);
  static std::shared_ptr<const JsonSchema> text_choice(const std::vector<std::string>& choices);
  const ByteRegex* text() const { return text_.get(); }  // null for a JSON document
  // The constraint after an optional reasoning block: `open` (unless the prompt already opened it:
  // `starts_open`), free text, `close`, at most a few newlines or spaces, then `base`'s reply. A reply that
  // starts with neither `open` nor reasoning goes straight to `base` (a model that does not think).
  struct ReasoningGate {
    std::string open, close;
    bool starts_open = false;
  };
  static std::shared_ptr<const JsonSchema> after_reasoning(const std::shared_ptr<const JsonSchema>& base,
                                                           ReasoningGate gate);
  const ReasoningGate* gate() const { return gate_.empty() ? nullptr : &gate_[0]; }

  JsonSchema();
  ~JsonSchema();
  const json_schema_detail::Node& node(int i) const;  // internal: the matcher's view of the graph
  int root() const { return root_; }

 private:
  friend class JsonSchemaCompiler;
  std::vector<json_schema_detail::Node> nodes_;
  int root_ = 0;
  std::string suffix_;
  std::shared_ptr<const ByteRegex> text_;
  std::vector<ReasoningGate> gate_;  // none or one
};

// Incremental matcher over the UTF-8 bytes of one JSON document. Nondeterminism (anyOf, type unions,
// enum prefixes) is kept as a few parse stacks side by side in one vector.
class JsonMatcher {
 public:
  // One parse-stack entry; a stack is a header frame followed by its frames.
  struct Frame {
    uint8_t kind = 0, state = 0, flags = 0, utf8_need = 0;
    uint8_t utf8_lo = 0, utf8_hi = 0;
    uint16_t digits = 0;
    int32_t node = 0;
    uint32_t count = 0;
    uint32_t aux = 0, aux2 = 0;
    uint64_t mask = 0;
    bool operator==(const Frame&) const = default;
  };

  explicit JsonMatcher(std::shared_ptr<const JsonSchema> schema);
  bool feed(uint8_t byte);            // false: the byte cannot continue any valid document; unchanged
  bool feed(std::string_view bytes);  // all or nothing
  bool complete() const;              // a complete document valid under the schema (and its suffix)
  bool dead_end() const;              // complete() and no further byte can be accepted
  size_t num_stacks() const;          // alternatives alive (diagnostics, tests)
  // The whole state as bytes (frames are 32 bytes without padding) and the schema it runs: two matchers
  // with equal keys accept the same byte strings from here on.
  std::string_view state_bytes() const {
    return {reinterpret_cast<const char*>(frames_.data()), frames_.size() * sizeof(Frame)};
  }
  const std::shared_ptr<const JsonSchema>& schema() const { return schema_; }
  // state_bytes() with what the next `horizon` code points cannot tell apart folded together: a string with
  // length bounds (and no pattern) whose count is past minLength and at least `horizon` below maxLength
  // accepts the same next bytes whatever the count. JsonTokenFilter caches masks by this key (horizon: the
  // longest token), so a bounded string's characters reuse one mask like a free string's.
  std::string cache_key(uint32_t horizon) const;

 private:
  // The document alone (the schema's suffix aside).
  bool feed_document(uint8_t byte);
  bool document_complete() const;
  bool document_dead_end() const;
  // Past the document, inside the suffix: one header frame, flags = 1, aux2 = suffix bytes matched.
  bool in_suffix() const { return frames_.size() == 1 && frames_[0].flags == 1; }
  // A text_regex schema: one header frame, flags = 2, aux2 = the DFA state.
  // Before the reply proper (a gate): one header frame, flags = 3, aux = the phase (kOpening, kThinking,
  // kAfter), aux2 = bytes of the marker matched (of the whitespace, after it).
  bool gated() const { return frames_.size() == 1 && frames_[0].flags == 3; }
  bool feed_gate(uint8_t byte);
  void start_reply();  // the state before the reply's first byte (document or text)

  std::shared_ptr<const JsonSchema> schema_;
  std::vector<Frame> frames_;
};
static_assert(sizeof(JsonMatcher::Frame) == 32, "state_bytes(): frames must have no padding");

}  // namespace tf
