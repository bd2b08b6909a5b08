#!/usr/bin/env bash
# GPT-2 124M (d12) on 10B FineWeb tokens: 0.5M tokens per step for 18,865 steps, peak lr 6e-4 after
# 700 warmup steps, cosine to 0, weight decay 0.1, GELU recomputed, ZeRO-1 across the ranks.
# B=64 per GPU fits an 80 GB card; on a smaller one lower -b (accumulation keeps -d).
exec "$(dirname "$0")/train_supervised.sh" gpt2_124M -e d12 -b 64 -t 1024 -d 524288 \
  -l 0.0006 -u 700 -q 0.0 -c 0.1 -x 18865 -r 1 -z 1 -n 5000 -v 250 -s 20000 -h 1 --override "$@"
