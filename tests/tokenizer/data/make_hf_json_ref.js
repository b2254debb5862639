// Writes hf-ref.json: ids and decoded text for the hf-json test files, computed by the
// Hugging Face `tokenizers` crate (0.22, through the npm package @anush008/tokenizers,
// which ships it prebuilt). Run once, with the package installed anywhere on NODE_PATH:
//   NODE_PATH=/path/to/node_modules node make_hf_json_ref.js /work/shared/data/gpt2
// Also the token count and id sum of the whole of Tiny Shakespeare (next to gpt2/).
// Encoding uses add_special_tokens = true, decoding skip_special_tokens = false, as
// Megatron's HuggingFaceTokenizer does.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');

const gpt2 = process.argv[2];
const vocab = JSON.parse(fs.readFileSync(gpt2 + '/gpt2-vocab.json', 'utf8'));
const merges = fs.readFileSync(gpt2 + '/gpt2-merges.txt', 'utf8').split('\n')
                   .filter((l, i) => i > 0 && l.length > 0);

function load(name) {
  const j = JSON.parse(fs.readFileSync(name, 'utf8'));
  if (name.includes('skeleton')) {
    j.model.vocab = vocab;
    j.model.merges = merges;
  }
  return Tokenizer.fromString(JSON.stringify(j));
}

const SENTENCES = [
  'Hello world',
  'First Citizen:\nBefore we proceed any further, hear me speak.',
  "  leading, trailing   and   runs of spaces  \n\n\tTabs; it's they'll WE'RE",
  'Numbers 1234567 and 3.14159, years 1599!',
  'Caf\u00e9 na\u00efve \u00c5NGSTR\u00d6M \u4e2d\u6587\u5b57 \ud83d\ude42\ud83d\udc4d',
  'special <|endoftext|> inside<|endoftext|>text <s> and </s>',
  '<|begin_of_text|>already there <|end_of_text|>',
  '\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \ufb01ne \u2460\u2461',
  'line one\r\nline two\n\n\nline three   ',
  '',
  ' ',
];

(async () => {
  const out = {};
  for (const name of ['hf-gpt2-skeleton.json', 'hf-llama3-skeleton.json', 'hf-llama2-bf.json',
                      'hf-llama2-metaspace.json', 'hf-sp-lower.json']) {
    const tok = load(name);
    out[name] = [];
    for (const s of SENTENCES) {
      const ids = (await tok.encode(s)).getIds();
      const decoded = await tok.decode(ids, false);
      out[name].push({text: s, ids, decoded});
    }
  }
  // Whole-corpus check: token count and id sum of Tiny Shakespeare per GPT-2-based layout.
  const corpus = fs.readFileSync(gpt2 + '/../tinyshakespeare/input.txt', 'utf8');
  out.tinyshakespeare = {};
  for (const name of ['hf-gpt2-skeleton.json', 'hf-llama3-skeleton.json']) {
    const ids = (await load(name).encode(corpus)).getIds();
    out.tinyshakespeare[name] = {count: ids.length, sum: ids.reduce((a, b) => a + b, 0)};
  }
  fs.writeFileSync('hf-ref.json', JSON.stringify(out, null, 1) + '\n');
})();
