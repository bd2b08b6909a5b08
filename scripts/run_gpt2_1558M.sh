#!/usr/bin/env bash
# GPT-2 1.5B (d48) on 32B FineWeb tokens: 1M tokens per step for 32,000 steps, peak lr 6e-4 after
# 700 warmup steps, cosine to 10%, weight decay 0.1, GELU and LayerNorm recomputed, ZeRO-1.
# B=16 per GPU with -r 2 fits an 80 GB card.
exec "$(dirname "$0")/train_supervised.sh" gpt2_1558M -e d48 -b 16 -t 1024 -d 1048576 \
  -l 0.0006 -u 700 -q 0.1 -c 0.1 -x 32000 -r 2 -z 1 -n 2000 -v 250 -s 20000 -h 1 --override "$@"
