// tokenizer/null: ids written as whitespace-separated integers; vocab_size N gives ordinary
// ids 0..N-1, EOD = N and a reported vocabulary of N + 1 (Megatron's NullTokenizer).
#include <string>
#include <vector>

#include "tokenizer_test_util.hpp"

namespace {

using toktest::Outcome;
using toktest::Tokenizer;

std::map<std::string, std::string> vocab(int n) { return {{"vocab_size", std::to_string(n)}}; }

Outcome encode_error(Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  return t.try_encode(text, ids);
}

}  // namespace

TEST_CASE("null: descriptor; vocab_size is a required int >= 1") {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("tokenizer", "null");
  CHECK(std::string(d->name) == "null");
  REQUIRE(d->num_params == 1);
  CHECK(std::string(d->params[0].name) == "vocab_size");
  CHECK(d->params[0].type == LOOM_PARAM_INT);
  CHECK(d->params[0].default_value == nullptr);
  CHECK(d->params[0].min_value == 1);
}

TEST_CASE("null: vocab_size N -> ids 0..N-1, EOD N, vocabulary N + 1 (as Megatron)") {
  Tokenizer t("null", vocab(1000));
  REQUIRE_MESSAGE(t.created().ok(), t.created().message);
  CHECK(t.vocab_size() == 1001);
  CHECK(t.eod_id() == 1000);
  Tokenizer one("null", vocab(1));
  CHECK(one.vocab_size() == 2);
  CHECK(one.eod_id() == 1);
  CHECK(one.encode("0 1 0") == std::vector<int32_t>{0, 1, 0});
}

TEST_CASE("null: encode reads integers separated by any ASCII whitespace") {
  Tokenizer t("null", vocab(1000));
  CHECK(t.encode("0 1 2 999") == std::vector<int32_t>{0, 1, 2, 999});
  CHECK(t.encode("\t 5\n\n6 \r\n7\v8\f9  ") == std::vector<int32_t>{5, 6, 7, 8, 9});
  CHECK(t.encode("12 1000 3") == std::vector<int32_t>{12, 1000, 3});  // EOD
  CHECK(t.encode("007") == std::vector<int32_t>{7});
  CHECK(t.encode("").empty());
  CHECK(t.encode(" \n\t ").empty());
}

TEST_CASE("null: decode writes ids separated by single spaces; encode(decode(ids)) == ids") {
  Tokenizer t("null", vocab(1000));
  CHECK(t.decode({}).empty());
  CHECK(t.decode({42}) == "42");
  CHECK(t.decode({0, 1, 1000, 999}) == "0 1 1000 999");
  const std::vector<int32_t> ids = {3, 1000, 0, 0, 17, 999};
  CHECK(t.encode(t.decode(ids)) == ids);
  CHECK(t.decode(t.encode("  1\n\n2\t3 ")) == "1 2 3");
}

TEST_CASE("null: text that is not an id is an error naming it and its offset") {
  Tokenizer t("null", vocab(1000));
  Outcome o = encode_error(t, "12 abc 3");
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(o.message.find("'abc'") != std::string::npos);
  CHECK(o.message.find("byte 3") != std::string::npos);
  for (const std::string bad : {"1.5", "0x10", "+4", "-", "7a", "\xff\xfe", "1,2", "\xd9\xa1"}) {
    CAPTURE(bad);
    o = encode_error(t, "1 " + bad);
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("not an id") != std::string::npos);
  }
  // Long offending text is shortened, and bytes that are not printable are escaped.
  o = encode_error(t, std::string(100, 'x') + "\x01");
  CHECK(o.message.find("...") != std::string::npos);
  CHECK(o.message.size() < 300);
}

TEST_CASE("null: ids out of range are errors naming them") {
  Tokenizer t("null", vocab(1000));
  for (const std::string bad : {"1001", "-1", "-0", "99999999999999999999999", "2147483648"}) {
    CAPTURE(bad);
    const Outcome o = encode_error(t, "5 " + bad + " 6");
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(o.message.find("'" + bad + "'") != std::string::npos);
    CHECK(o.message.find("out of range") != std::string::npos);
    CHECK(o.message.find("byte 2") != std::string::npos);
  }
  std::string text;
  Outcome o = t.try_decode({1, 1001}, text);
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(o.message.find("id 1001 at position 1") != std::string::npos);
  o = t.try_decode({-5}, text);
  CHECK(o.message.find("id -5") != std::string::npos);
}

TEST_CASE("null: vocab_size out of range is refused at create") {
  for (const std::string n : {"0", "-3", "2147483647"}) {
    CAPTURE(n);
    Tokenizer t("null", {{"vocab_size", n}});
    CHECK(t.created().code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(t.created().message.find("vocab_size") != std::string::npos);
  }
  Tokenizer largest("null", {{"vocab_size", "2147483646"}});
  CHECK(largest.created().ok());
  CHECK(largest.vocab_size() == 2147483647);
  CHECK(largest.encode("2147483646") == std::vector<int32_t>{2147483646});
}
