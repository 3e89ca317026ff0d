// Shapes at the edge of 32-bit integers (docs/design.md, "Index types and size limits"):
// a quantity that fits is computed exactly, one that cannot be represented is refused with a
// std::length_error naming it, before anything is allocated.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "tests/test_helpers.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;

namespace {

using test::length_error_of;
using test::mentions;

}  // namespace

TEST_CASE("padded vocabulary near 2^31", "[model][overflow]") {
  model::GptShape s;
  // INT_MAX = 3 * 715827882 + 1: padding 2147483646 to a multiple of 3 is 2147483646 itself,
  // but vocab + tensor - 1 = 2^31 used to wrap to a negative padded vocabulary.
  s.vocab_size = 2147483646;
  s.tensor = 3;
  CHECK(s.padded_vocab() == 2147483646);
  CHECK(s.local_vocab() == 715827882);
  CHECK(s.vocab_start(2) == 1431655764);
  CHECK(s.valid_vocab(2) == 715827882);

  s.vocab_size = INT_MAX;
  s.tensor = 1;
  CHECK(s.padded_vocab() == INT_MAX);
  // INT_MAX is odd: padded to a multiple of 2 it needs 2^31 rows, which an int cannot count.
  s.tensor = 2;
  const std::string msg = length_error_of([&] { (void)s.padded_vocab(); });
  CHECK(mentions(msg, "model.vocab_size = 2147483647"));
  CHECK(mentions(msg, "parallel.tensor = 2"));
  CHECK(mentions(msg, "2147483647"));
  s.vocab_size = 2147483641;  // + 7 used to overflow
  s.tensor = 8;
  CHECK_THROWS_AS(s.padded_vocab(), std::length_error);
}

TEST_CASE("the vocabulary is padded to a multiple of vocab_pad_multiple * tensor", "[model]") {
  model::GptShape s;
  s.vocab_size = 50257;
  CHECK(s.padded_vocab() == 50257);  // vocab_pad_multiple = 1, tensor = 1: no padding
  s.vocab_pad_multiple = 128;
  CHECK(s.padded_vocab() == 50304);  // Megatron's GPT-2 vocabulary: 393 * 128
  s.tensor = 2;
  CHECK(s.padded_vocab() == 50432);  // 197 * 256
  CHECK(s.local_vocab() == 25216);   // every rank's block a multiple of the pad
  CHECK(s.local_vocab() % 128 == 0);
  CHECK(s.valid_vocab(0) == 25216);
  CHECK(s.valid_vocab(1) == 50257 - 25216);
  s.vocab_size = 256;  // already a multiple: unchanged
  CHECK(s.padded_vocab() == 256);
  s.vocab_size = 2147483520;  // 2^31 - 128, a multiple of 128 but not of 256
  const std::string msg = length_error_of([&] { (void)s.padded_vocab(); });
  CHECK(mentions(msg, "model.vocab_pad_multiple = 128"));
  CHECK(mentions(msg, "parallel.tensor = 2"));
  s.vocab_pad_multiple = 0;
  s.vocab_size = 256;
  CHECK_THROWS_AS(s.validate(), std::invalid_argument);
}

TEST_CASE("shape validation refuses dimensions beyond int", "[model][overflow]") {
  model::GptShape s = test::tiny_shape(1);
  REQUIRE_NOTHROW(s.validate());

  // The QKV weight has 3 * hidden rows: 3 * 2^30 does not fit in an int.
  s.hidden = 1 << 30;
  s.heads = 1 << 20;
  const std::string qkv = length_error_of([&] { s.validate(); });
  CHECK(mentions(qkv, "3 * model.hidden"));
  CHECK(mentions(qkv, "3221225472"));

  s = test::tiny_shape(1);
  s.vocab_size = INT_MAX;
  s.tensor = 2;
  s.heads = 4;
  CHECK_THROWS_AS(s.validate(), std::length_error);

  // Non-positive sizes are invalid arguments, not a division by zero.
  s = test::tiny_shape(1);
  s.heads = 0;
  CHECK_THROWS_AS(s.validate(), std::invalid_argument);
  s = test::tiny_shape(1);
  s.tensor = 0;
  CHECK_THROWS_AS(s.validate(), std::invalid_argument);
}

TEST_CASE("micro-batch limits are checked before anything is allocated", "[model][overflow]") {
  model::GptShape s = test::tiny_shape(1);
  REQUIRE_NOTHROW(s.validate(2));
  CHECK_THROWS_AS(s.validate(0), std::invalid_argument);

  // 2^20 sequences of 2^12 tokens: 2^32 tokens in one micro-batch.
  s.seq_length = 1 << 12;
  const std::string tokens = length_error_of([&] { s.validate(1 << 20); });
  CHECK(mentions(tokens, "training.micro_batch * model.seq_length"));
  CHECK(mentions(tokens, "4294967296"));

  // S = 65536 with 32768 local heads: 2^31 attention rows from only 65536 tokens.
  s.seq_length = 65536;
  s.hidden = 32768;
  s.heads = 32768;
  const std::string rows = length_error_of([&] { s.validate(1); });
  CHECK(mentions(rows, "attention rows"));
  CHECK(mentions(rows, "2147483648"));
  s.heads = 32767 * 2;  // over tensor = 2: 32767 local heads, 2147418112 rows fit
  s.hidden = s.heads;
  s.tensor = 2;
  CHECK_NOTHROW(s.validate(1));

  // The model refuses the shape before allocating its buffers (2^32 tokens of 16 floats would be
  // 256 GiB).
  s = test::tiny_shape(1);
  s.seq_length = 1 << 12;
  auto tp = test::tp_group(1);
  CHECK_THROWS_AS(model::GptModel<float>(s, 1 << 20, *tp, 1), std::length_error);
}
