#!/usr/bin/env bash
# The whole chain on an embedded default data set, offline, on this machine:
# set up .venv, start a local Ray head, `ray job submit` the pretokenize job and the
# materialize-shuffle job (3 epochs), verify them, train a few steps from prep.reader,
# then resume from the checkpoint. Outputs go to out/demo/ (replaced on every run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH" RAY_AUTH_MODE=token TOKENIZERS_PARALLELISM=false RAY_DISABLE_USAGE_STATS=1
unset RAY_ADDRESS
# The head and the submitter share a token of this run's own (a fresh machine has no ~/.ray/auth_token).
RAY_AUTH_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))'); export RAY_AUTH_TOKEN

OUT="$PWD/out/demo"
rm -rf "$OUT" && mkdir -p "$OUT/raw"
python examples/make_demo_data.py "$OUT/raw/arith.jsonl" --rows 4000

RAY_TMP=$(mktemp -d /tmp/prep-demo-ray-XXXX)
free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GCS_PORT=$(free_port); DASH_PORT=$(free_port); AGENT_PORT=$(free_port)
stop_head() {  # only this head: `ray stop` would stop every Ray on the host
  local group; group=$(cat "$RAY_TMP/pgid" 2>/dev/null || true)
  for sig in TERM KILL; do  # its process group (GCS, raylet, dashboard, agents), then its workers
    [ -n "$group" ] && { kill -s "$sig" -- "-$group" 2>/dev/null || true; }
    pkill -"$sig" -f "$RAY_TMP" 2>/dev/null || true; sleep 1
  done
  rm -rf "$RAY_TMP"
}
trap stop_head EXIT
echo "== starting a local Ray head"
setsid --wait bash -c 'echo $$ > "$0/pgid"; exec "$@"' "$RAY_TMP" ray start --head --num-cpus="$(nproc)" --port="$GCS_PORT" --dashboard-port="$DASH_PORT" \
  --dashboard-agent-listen-port="$AGENT_PORT" --dashboard-agent-grpc-port="$(free_port)" \
  --runtime-env-agent-port="$(free_port)" --metrics-export-port="$(free_port)" --dashboard-host=127.0.0.1 --object-store-memory=500000000 --temp-dir="$RAY_TMP" --disable-usage-stats >/dev/null

for _ in $(seq 60); do  # the job agent comes up a few seconds after `ray start` returns
  python -c "import socket; socket.create_connection(('127.0.0.1', $AGENT_PORT), 1)" 2>/dev/null && break; sleep 1
done
SUBMIT=(ray job submit --address "http://127.0.0.1:$DASH_PORT" --working-dir . --)
quiet() { grep -v -E "^20[0-9-]+ [0-9:,]+\s+(INFO|WARNING)" || true; }

echo "== ray job submit: pretokenize (builtin Mistral v3 tokenizer, SFT with loss on answers)"
"${SUBMIT[@]}" python pipelines/pretokenize.py --config configs/gsm8k-sft.yaml \
  --input "$OUT/raw/arith.jsonl" --output "$OUT/arith-sft.lance" 2>&1 | quiet
echo "== ray job submit: materialize-shuffle --epochs 3 (8 splits: world sizes 1, 2, 4, 8)"
"${SUBMIT[@]}" python pipelines/materialize_shuffle.py --table "$OUT/arith-sft.lance" \
  --output "$OUT/arith-epochs" --epochs 3 --splits 8 2>&1 | quiet

echo "== prep verify: every row once per epoch, split sizes, checksums, source version"
prep verify "$OUT/arith-epochs"

echo "== train a small causal LM from prep.reader for 6 steps, checkpoint (model + optimizer + reader state)"
python examples/train_sft.py --data "$OUT/arith-epochs" --global-batch-size 8 --steps 6 --log-every 2 --ckpt "$OUT/ckpt.pt"
echo "== resume from the checkpoint: the reader seeks to the next batch and training continues to step 10"
python examples/train_sft.py --data "$OUT/arith-epochs" --global-batch-size 8 --steps 10 --log-every 2 --ckpt "$OUT/ckpt.pt" --resume

echo "== done: $OUT"
