// The named batch (ABI 2): a model's batch_spec is checked against the arrays the host's data
// provides before the first step. GPT samples provide tokens and targets, int32 (B, T), and
// positions too when packed (data.pack_sequences); a
// model that reads anything else, or reads them with another dtype or shape, is refused with
// the model, the array and the provided list named.
#include <doctest/doctest.h>

#include <iterator>
#include <string>

#include "base/errors.hpp"
#include "train/batch_check.hpp"
#include "train/train_run.hpp"

using loom::engine::check_batch_spec;
using loom::engine::Feed;

namespace {

const int64_t kBT[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
const int64_t kB512[2] = {LOOM_DIM_BATCH, 512};
constexpr DLDataType kI32{kDLInt, 32, 1}, kF32{kDLFloat, 32, 1};

std::string refusal(const loom_array_spec* wants, size_t n, bool packed = false) {
  const std::vector<loom_array_spec> provides = Feed::provides(packed);
  try {
    check_batch_spec(wants, n, provides.data(), provides.size(), "toy");
  } catch (const loom::engine::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GPT samples provide tokens and targets, int32 (B, T)") {
  REQUIRE(Feed::provides(false).size() == 2);
  const loom_array_spec gpt[2] = {{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, kI32, 2, kBT},
                                  {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kBT}};
  CHECK(refusal(gpt, 2).empty());  // in any order
  CHECK(refusal(gpt, 1).empty());  // a stage-only model may read fewer
}

TEST_CASE("a model reading an array the data lacks, or with another dtype or shape, is refused") {
  const loom_array_spec bert[2] = {{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kBT},
                                   {LOOM_ARRAY_SPEC_SIZE_V2, "token_types", kI32, 2, kBT}};
  const std::string missing = refusal(bert, 2);
  CHECK_MESSAGE(missing.find("model/toy reads the micro-batch array token_types (i32 B x T)") !=
                    std::string::npos,
                missing);
  CHECK_MESSAGE(
      missing.find("it provides tokens (i32 B x T), targets (i32 B x T)") != std::string::npos,
      missing);

  const loom_array_spec float_targets{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TARGETS, kF32, 2, kBT};
  CHECK(refusal(&float_targets, 1).find("targets (f32 B x T)") != std::string::npos);
  const loom_array_spec fixed{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kB512};
  CHECK(refusal(&fixed, 1).find("tokens (i32 B x 512)") != std::string::npos);
  const loom_array_spec flat{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 1, kBT};
  CHECK(refusal(&flat, 1).find("tokens (i32 B)") != std::string::npos);
}

TEST_CASE("packed samples also provide positions, int32 (B, T)") {
  const loom_array_spec packed{LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_POSITIONS, kI32, 2, kBT};
  CHECK(refusal(&packed, 1, true).empty());
  CHECK(refusal(&packed, 1, false).find("reads the micro-batch array positions (i32 B x T)") !=
        std::string::npos);
}
