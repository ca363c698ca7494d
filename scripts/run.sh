#!/usr/bin/env bash
# Quick start #1: install dependencies, build, and generate text. With no arguments it
# runs the small built-in model (random weights: the text is gibberish by design, it
# shows the engine working end to end). Arguments go to `brass run`, e.g.
#   scripts/run.sh -m gpt-oss-20b-mxfp4.gguf -p "Why is the sky blue?"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
if [ $# -eq 0 ]; then set -- -p "The capital of France is" -n 32; fi
exec ./build/brass run "$@"
