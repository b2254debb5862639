// Cross-check of wordpiece-ref.json against the Hugging Face `tokenizers` crate (0.22,
// npm package @anush008/tokenizers) with BertNormalizer + BertPreTokenizer + WordPiece:
//   NODE_PATH=/path/to/node_modules node check_wordpiece_with_hf.js
// Prints DIFF lines. Expected: one, "ΟΔΟΣ ... ΟΔΟΣ." with lower_case, where HF lower-cases
// per character (σ) and Python's str.lower, like Megatron's BERT, writes a final ς.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const dir = __dirname + '/';
const lines = fs.readFileSync(dir + 'wordpiece-vocab.txt', 'utf8').split('\n').slice(0, -1);
const vocab = {}; lines.forEach((t, i) => vocab[t] = i);
const ref = JSON.parse(fs.readFileSync(dir + 'wordpiece-ref.json', 'utf8'));
(async () => {
  for (const lower of [true, false]) {
    const j = {version: '1.0', truncation: null, padding: null, added_tokens: [],
      normalizer: {type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: lower},
      pre_tokenizer: {type: 'BertPreTokenizer'}, post_processor: null, decoder: null,
      model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 200, vocab}};
    const tok = Tokenizer.fromString(JSON.stringify(j));
    for (const c of ref.cases) {
      const e = await tok.encode(c.text);
      const got = e.getIds(); const want = lower ? c.lower : c.cased;
      const same = JSON.stringify(got) === JSON.stringify(want);
      if (!same) console.log('DIFF', lower, JSON.stringify(c.text), '\n hf ', JSON.stringify(got), '\n ref', JSON.stringify(want));
    }
  }
  console.log('done');
})();
