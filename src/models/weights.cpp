#include "models/weights.h"

#include "checkpoint/checkpoint.h"
#include "models/decoder_layer.h"

namespace tf {

LinearWeight load_linear(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t out, int64_t in,
                         bool bias) {
  LinearWeight w;
  w.weight = fetch_tensor(ckpt, base + ".weight", {out, in});
  if (bias) w.bias = fetch_tensor(ckpt, base + ".bias", {out});
  w.in_features = in;
  w.out_features = out;
  return be.upload_linear(w);
}

}  // namespace tf
