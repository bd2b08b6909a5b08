#!/usr/bin/env bash
# GPT-2 350M (d24) on 30B FineWeb tokens: 0.5M tokens per step for 57,000 steps, peak lr 3e-4 after
# 700 warmup steps, cosine to 0, weight decay 0.1, GELU recomputed, ZeRO-1 across the ranks.
exec "$(dirname "$0")/train_supervised.sh" gpt2_350M -e d24 -b 32 -t 1024 -d 524288 \
  -l 0.0003 -u 700 -q 0.0 -c 0.1 -x 57000 -r 1 -z 1 -n 5000 -v 250 -s 20000 -h 1 --override "$@"
