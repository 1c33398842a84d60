# The WMT14 translation recipes' three steps (sourced by recipes/wmt14_*/{prepare,train,generate}.sh,
# after their settings.sh): wmt_prepare, wmt_train, wmt_generate.
#
# The settings name SRC, TGT, VOCAB_SIZE, CORPORA (one "URL SHA256 SRC_MEMBER TGT_MEMBER" per
# training corpus), VALID_SET/TEST_SET (sacreBLEU test set names) and, per MODEL (base or big),
# ARCH_<model> and DROPOUT_<model>.
# shellcheck shell=bash

# shellcheck source=recipes/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MODEL="${MODEL:-big}"
[[ $MODEL == base || $MODEL == big ]] || die "MODEL must be base or big, got '$MODEL'"
if [[ $SMOKE == 1 ]]; then WORK_DIR="${WORK_DIR:-$ROOT/work/$NAME-smoke}"; fi
WORK_DIR="${WORK_DIR:-$ROOT/work/$NAME}"
DATA_BIN="$WORK_DIR/data-bin"
CHECKPOINTS="${CHECKPOINTS:-$WORK_DIR/checkpoints-$MODEL}"
THREADS="${THREADS:-$(nproc)}"
if [[ $SMOKE == 1 ]]; then
  CHECKPOINTS="$WORK_DIR/checkpoints-smoke"
  AVERAGE_LAST=2
elif [[ $MODEL == base ]]; then
  AVERAGE_LAST=5  # §6.1: base models average the last 5 checkpoints
else
  AVERAGE_LAST=20  # §6.1: big models the last 20
fi

verify_sha256() {
  local file=$1 sum=$2
  echo "$sum  $file" | sha256sum --check --status ||
    die "$file: sha256 is not $sum (a damaged or changed download); delete it and run again"
}

# download URL SHA256 DEST: resumable (curl -C - into DEST.part), checked, never twice.
download() {
  local url=$1 sum=$2 dest=$3
  if [[ -f $dest ]]; then
    note "$dest already downloaded"
    return 0
  fi
  run curl --fail --location --retry 5 --continue-at - --output "$dest.part" "$url"
  run verify_sha256 "$dest.part" "$sum"
  run mv "$dest.part" "$dest"
}

# The raw corpus: train.{SRC,TGT} cleaned, valid.* (newstest2013) and test.* (newstest2014), checked.
wmt_prepare() {
  require_tool python fairseq-preprocess
  if [[ $SMOKE != 1 ]]; then require_tool sacrebleu curl sha256sum tar gunzip; fi
  local raw="$WORK_DIR/raw" parts=() url sum member_s member_t archive
  run mkdir -p "$raw"
  if [[ $SMOKE == 1 ]]; then
    note "SMOKE: the embedded corpus instead of WMT14 (nothing is downloaded)"
    run python -m vaswani_plugin.data.synthetic_corpus --out "$WORK_DIR/smoke-corpus" --train 2000 --valid 40 \
      --test 29 --src "$SRC" --tgt "$TGT"
    parts=("$WORK_DIR/smoke-corpus/train.$SRC" "$WORK_DIR/smoke-corpus/train.$TGT")
    for split in valid test; do
      run cp "$WORK_DIR/smoke-corpus/$split.$SRC" "$WORK_DIR/smoke-corpus/$split.$TGT" "$raw/"
    done
  else
    run mkdir -p "$WORK_DIR/downloads" "$WORK_DIR/extracted"
    for corpus in "${CORPORA[@]}"; do
      read -r url sum member_s member_t <<< "$corpus"
      archive="$WORK_DIR/downloads/$(basename "$url")"
      download "$url" "$sum" "$archive"
      local missing=()
      for member in "$member_s" "$member_t"; do
        [[ -f "$WORK_DIR/extracted/${member%.gz}" ]] || missing+=("$member")
        parts+=("$WORK_DIR/extracted/${member%.gz}")
      done
      if ((${#missing[@]})); then
        run tar -xf "$archive" -C "$WORK_DIR/extracted" "${missing[@]}"
        for member in "${missing[@]}"; do
          if [[ $member == *.gz ]]; then run gunzip "$WORK_DIR/extracted/$member"; fi
        done
      fi
    done
    # sacreBLEU fetches the test sets from statmt.org, checks their md5 and keeps them in ~/.sacrebleu.
    run_to "$raw/valid.$SRC" sacrebleu -t "$VALID_SET" -l "$SRC-$TGT" --echo src
    run_to "$raw/valid.$TGT" sacrebleu -t "$VALID_SET" -l "$SRC-$TGT" --echo ref
    run_to "$raw/test.$SRC" sacrebleu -t "$TEST_SET" -l "$SRC-$TGT" --echo src
    run_to "$raw/test.$TGT" sacrebleu -t "$TEST_SET" -l "$SRC-$TGT" --echo ref
  fi

  note "cleaning the training corpus; checking the valid and test sets"
  run python -m vaswani_plugin.data.check_parallel clean "${parts[@]}" --out-prefix "$raw/train" \
    --suffixes "$SRC" "$TGT" --max-words 250 --max-ratio 1.5
  run python -m vaswani_plugin.data.check_parallel check "$raw/valid.$SRC" "$raw/valid.$TGT" \
    "$raw/test.$SRC" "$raw/test.$TGT"

  local vocab=$VOCAB_SIZE
  if [[ $SMOKE == 1 ]]; then vocab=300; fi
  note "a shared sentencepiece BPE vocabulary of $vocab pieces (§5.1)"
  run python -m vaswani_plugin.data.spm train --inputs "$raw/train.$SRC" "$raw/train.$TGT" \
    --model-prefix "$WORK_DIR/spm" --vocab-size "$vocab"
  run python -m vaswani_plugin.data.spm encode --model "$WORK_DIR/spm.model" \
    --input "$raw"/{train,valid,test}."$SRC" "$raw"/{train,valid,test}."$TGT" \
    --output "$WORK_DIR"/{train,valid,test}.sp."$SRC" "$WORK_DIR"/{train,valid,test}.sp."$TGT"

  run rm -rf "$DATA_BIN"
  run fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" --trainpref "$WORK_DIR/train.sp" \
    --validpref "$WORK_DIR/valid.sp" --testpref "$WORK_DIR/test.sp" --destdir "$DATA_BIN" \
    --joined-dictionary --workers "$THREADS"
  note "$RECIPE: raw text in $raw, sentencepiece model $WORK_DIR/spm.model, binarized data in $DATA_BIN"
}

# fairseq-train with the paper's settings; several machines through torchrun (NNODES > 1).
wmt_train() {
  require_tool fairseq-train
  require_file "$DATA_BIN/dict.$SRC.txt"
  local arch_var="ARCH_$MODEL" dropout_var="DROPOUT_$MODEL" gpu_flags=() launcher=(fairseq-train)
  local arch=${!arch_var} dropout=${!dropout_var} max_update save_every warmup=4000
  if [[ $MODEL == base ]]; then
    # §5.2: 100k steps in 12 hours; checkpoints every 10 minutes (§6.1) = every ~1400 updates.
    max_update=${MAX_UPDATE:-100000} save_every=1400
  else
    # §5.2: 300k steps in 3.5 days; 10 minutes = ~600 updates.
    max_update=${MAX_UPDATE:-300000} save_every=600
  fi
  if [[ $SMOKE == 1 ]]; then
    # 4 updates of 256 tokens: fp16 products run about 4x slower than fp32 on a CPU, which made 10
    # updates of 512 tokens a minute of every SMOKE run; two checkpoints are still averaged.
    note "SMOKE: vaswani_transformer_tiny, 4 updates of 256 tokens, one CPU process, fp16 as on GPUs"
    arch=vaswani_transformer_tiny dropout=0.1 max_update=4 save_every=2 warmup=2
    MAX_TOKENS=256 UPDATE_FREQ=1 gpu_flags=(--fp16)  # fp16 on a CPU: vaswani_plugin/fairseq_fixes/fp16_cpu.py
  else
    local nnodes=${NNODES:-1} per_node
    per_node=$(gpu_count)
    batch_for_world $((per_node * nnodes))
    gpu_flags=(--fp16 --distributed-world-size $((per_node * nnodes)))
    if ((nnodes > 1)); then
      require_var NODE_RANK MASTER_ADDR
      launcher=(torchrun --nnodes "$nnodes" --node_rank "$NODE_RANK" --nproc_per_node "$per_node"
        --master_addr "$MASTER_ADDR" --master_port "${MASTER_PORT:-29500}" "$(command -v fairseq-train)")
    fi
  fi
  run "${launcher[@]}" "$DATA_BIN" --user-dir "$USER_DIR" \
    --arch "$arch" --share-all-embeddings --dropout "$dropout" \
    --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
    --lr-scheduler inverse_sqrt_warmup --warmup-updates "$warmup" \
    --criterion label_smoothed_xent --label-smoothing 0.1 \
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$max_update" "${gpu_flags[@]}" \
    "${CPU_FLAGS[@]}" --save-dir "$CHECKPOINTS" --save-interval-updates "$save_every" --keep-interval-updates "$AVERAGE_LAST" \
    --no-epoch-checkpoints --seed 1 --log-format simple --log-interval 100
  note "$RECIPE: checkpoints in $CHECKPOINTS"
}

# Average the last checkpoints, translate newstest2014 (§6.1), score every sentence.
wmt_generate() {
  require_tool vaswani-average-checkpoints fairseq-generate python
  require_file "$CHECKPOINTS" "$DATA_BIN/test.$SRC-$TGT.$SRC.bin" "$WORK_DIR/raw/test.$TGT"
  run vaswani-average-checkpoints --inputs "$CHECKPOINTS" --num-update-checkpoints "$AVERAGE_LAST" \
    --output "$CHECKPOINTS/averaged.pt"
  # --required-batch-size-multiple 1: fairseq 0.12 otherwise drops a last batch smaller than 8.
  run_to "$WORK_DIR/generate-$MODEL.out" fairseq-generate "$DATA_BIN" --user-dir "$USER_DIR" \
    --path "$CHECKPOINTS/averaged.pt" --gen-subset test --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50 \
    --batch-size 128 --required-batch-size-multiple 1 --remove-bpe sentencepiece "${CPU_FLAGS[@]}"
  run python -m vaswani_plugin.cli.score_bleu --generate-output "$WORK_DIR/generate-$MODEL.out" \
    --ref "$WORK_DIR/raw/test.$TGT" --hyp-out "$WORK_DIR/test-$MODEL.hyp.$TGT"
  note "$RECIPE: averaged checkpoint $CHECKPOINTS/averaged.pt, fairseq-generate output" \
    "$WORK_DIR/generate-$MODEL.out, translations $WORK_DIR/test-$MODEL.hyp.$TGT"
}
