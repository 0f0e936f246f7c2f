#!/usr/bin/env bash
# Faults and bad input of a training job started by mpirun:
#   1. ranks started with different model configs: exit 2, one message naming the rank;
#   2. --tensor-parallel that does not divide the ranks, the heads; a batch the replicas
#      cannot share; a command other than train: exit 2 naming the flag or field;
#   3. a rank killed with SIGKILL ends the whole job within 30 s, mpirun names the rank,
#      the last checkpoint is intact and --resume continues it (in one process: the
#      checkpoint does not depend on the layout);
#   4. a rank stopped with SIGSTOP ends the job once a collective has waited
#      --collective-timeout seconds, with a message naming the stopped rank.
# Usage: faults_test.sh PGQ MPIRUN (ctest sets the mpirun environment).
set -uo pipefail
pgq=$1
mpirun=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=("$mpirun" --oversubscribe --bind-to none)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_refusal NAME RANKS PATTERN ARGS...: exit 2 and exactly one line with PATTERN.
expect_refusal() {
  local name=$1 ranks=$2 pattern=$3
  shift 3
  local out rc
  out=$("${mpi[@]}" -np "$ranks" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "$name: exit $rc, expected 2. Output:
$out"
  local count
  count=$(grep -c -- "$pattern" <<<"$out")
  [ "$count" -eq 1 ] || fail "$name: expected one line matching '$pattern', got $count. Output:
$out"
  echo "ok: $name: $(grep -- "$pattern" <<<"$out")"
}

expect_refusal "different model configs" 2 "rank 1 was started with a different model config" \
  sh -c "exec '$pgq' train --model tiny --steps 2 --seed \$((1 + OMPI_COMM_WORLD_RANK)) --out '$tmp/mismatch' --no-progress"
# Flags that change the training or the job's collectives, given to one rank only: each
# trained another model in silence (--warmup, --corpus) or called other collectives
# (MPI_ERR_TRUNCATE, or a hang until the timeout).
r1='$((OMPI_COMM_WORLD_RANK))'
expect_refusal "a different --warmup on rank 1" 2 "rank 1 was started with a different optimizer" \
  sh -c "exec '$pgq' train --model tiny --steps 2 --warmup \$((1 + $r1)) --out '$tmp/warmup' --no-progress"
expect_refusal "a different --eval-every on rank 1" 2 "rank 1 was started with a different --eval-every" \
  sh -c "exec '$pgq' train --model tiny --steps 2 --eval-every \$((1 + $r1)) --out '$tmp/eval' --no-progress"
expect_refusal "a different bucket size on rank 1" 2 "rank 1 was started with a different PGQ_DP_BUCKET_MB" \
  sh -c "PGQ_DP_BUCKET_MB=\$((1 + $r1)) exec '$pgq' train --model tiny --steps 2 --out '$tmp/bucket1' --no-progress"
expect_refusal "a different --collective-timeout on rank 1" 2 "collective-timeout differs between the ranks" \
  sh -c "exec '$pgq' train --model tiny --steps 2 --collective-timeout \$((10 * $r1)) --out '$tmp/timeout' --no-progress"
head -c 20000 /usr/share/games/fortunes/fortunes >"$tmp/corpus0.txt"
head -c 20000 /usr/share/games/fortunes/literature >"$tmp/corpus1.txt"
expect_refusal "another corpus on rank 1" 2 "rank 1 read another corpus or tokenizer than rank 0" \
  sh -c "exec '$pgq' train --model tiny --steps 2 --corpus '$tmp/corpus'\$(($r1)).txt --out '$tmp/corpus' --no-progress"

expect_refusal "tensor parallel not dividing the ranks" 3 "does not divide the 3 ranks" \
  "$pgq" train --model tiny --steps 2 --tensor-parallel 2 --out "$tmp/ranks" --no-progress
expect_refusal "tensor parallel not dividing the heads" 4 "tensor_parallel.*must divide n_heads" \
  "$pgq" train --model tiny --steps 2 --tensor-parallel 4 --out "$tmp/heads" --no-progress
expect_refusal "batch not shared by the replicas" 3 "field 'batch' is 4" \
  "$pgq" train --model tiny --steps 2 --out "$tmp/batch" --no-progress

expect_refusal "a bad bucket size" 2 "PGQ_DP_BUCKET_MB=lots: expected an integer" \
  env PGQ_DP_BUCKET_MB=lots "$pgq" train --model tiny --steps 2 --out "$tmp/bucket" --no-progress
expect_refusal "a one-process command under mpirun" 2 "pgq roofline runs in one process" \
  "$pgq" roofline --model tiny --hardware epyc-zen3-2c
# --version on one rank of an MPMD job: that rank ended at once, and rank 0 waited in its
# first collective forever (session 17).
expect_refusal "--version on one rank" 2 "a rank of this job printed --help or --version instead of training" \
  sh -c "if [ \$OMPI_COMM_WORLD_RANK = 1 ]; then exec '$pgq' --version; fi; exec '$pgq' train --model tiny --steps 2 --out '$tmp/version' --no-progress"

# A long run that checkpoints often; rank 1 is killed once a checkpoint exists.
run=$tmp/kill
"${mpi[@]}" -np 2 "$pgq" train --model tiny --steps 1000000 --checkpoint-every 200 --eval-every 0 --out "$run" \
  --no-progress >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  [ -f "$run/checkpoint.pgqckpt" ] && break
  sleep 0.1
done
[ -f "$run/checkpoint.pgqckpt" ] || fail "no checkpoint after 30 s: $(cat "$tmp/kill.log")"
rank1=""
for pid in $(pgrep -f -- "--out $run"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then rank1=$pid; fi
done
[ -n "$rank1" ] || fail "rank 1 not found"
kill -KILL "$rank1"
killed=$(date +%s%N)
wait "$job"
rc=$?
elapsed_ms=$((($(date +%s%N) - killed) / 1000000))
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank was killed"
[ "$elapsed_ms" -lt 30000 ] || fail "the job took ${elapsed_ms} ms to end after a rank was killed"
grep -q "rank 1" "$tmp/kill.log" || fail "no message names rank 1: $(cat "$tmp/kill.log")"
echo "ok: killed rank 1 (pid $rank1): the job ended in ${elapsed_ms} ms with exit $rc: $(grep "rank 1" "$tmp/kill.log" | head -1)"

# The checkpoint is whole and continues in one process.
out=$("$pgq" train --model tiny --steps 1000000 --stop-after 5 --resume --out "$run" --no-progress 2>&1) ||
  fail "--resume after the kill failed: $out"
grep -q "resuming from" <<<"$out" || fail "no resume message: $out"
echo "ok: $(grep "resuming from" <<<"$out")"
# A stopped rank: the others' next collective times out and names it.
run=$tmp/stop
"${mpi[@]}" -np 2 "$pgq" train --model tiny --steps 1000000 --eval-every 0 --collective-timeout 2 --out "$run" \
  --no-progress >"$tmp/stop.log" 2>&1 &
job=$!
rank1=""
for _ in $(seq 300); do
  for pid in $(pgrep -f -- "--out $run"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then rank1=$pid; fi
  done
  [ -n "$rank1" ] && [ -f "$run/metrics.csv" ] && break
  sleep 0.1
done
[ -n "$rank1" ] || fail "rank 1 of the stop test not found: $(cat "$tmp/stop.log")"
kill -STOP "$rank1"
stopped=$(date +%s%N)
wait "$job"
rc=$?
elapsed_ms=$((($(date +%s%N) - stopped) / 1000000))
kill -KILL "$rank1" 2>/dev/null
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank was stopped"
[ "$elapsed_ms" -lt 30000 ] || fail "the job took ${elapsed_ms} ms to end after a rank was stopped"
# Stopped between collectives, the others' arrival check names it (it does not answer);
# stopped inside one, the watchdog names the collective's other members.
named="rank 0: a collective (.*) did not complete in [0-9]* s; rank 1 (does not answer|stopped or hangs inside it)"
grep -Eq "$named" "$tmp/stop.log" || fail "no message names the stopped rank 1: $(cat "$tmp/stop.log")"
echo "ok: stopped rank 1: the job ended in ${elapsed_ms} ms: $(grep -E "$named" "$tmp/stop.log")"
echo "all fault tests passed"
